"""A parity run's results: the Report the API returns, its JSON, and its self-contained HTML page.

The HTML page needs no network: inline CSS, matplotlib plots embedded as base64 PNG
(matplotlib is the optional extra ``validate``; it is imported only to write HTML).
"""
from __future__ import annotations

import base64
import html
import io
import json
import math
from collections import Counter
from dataclasses import asdict, dataclass
from datetime import datetime, timezone

from zoo.errors import ZooError
from zoo.extras import require


@dataclass
class Report:
    """``header``: the environment (model, weights, device, dtype, tf32, mlx, ...); ``modes``:
    one engine.ModeReport per (dtype, mode), in the order they ran."""

    header: dict
    modes: list

    @property
    def passed(self) -> bool:
        return all(m.passed for m in self.modes)

    @property
    def failing(self):
        """The first ModeReport with a failing layer, or None."""
        return next((m for m in self.modes if not m.passed), None)

    @property
    def first_failure(self) -> str | None:
        """The first failing layer's name (of the first dtype and mode that fails)."""
        failing = self.failing
        return None if failing is None else failing.first_failure

    @property
    def dtypes(self) -> list[str]:
        return list(dict.fromkeys(m.dtype for m in self.modes))

    @property
    def layers(self) -> list[dict]:
        """Every compared row: dtype, mode, name, shape, max_abs, rel, cosine, flags, status."""
        return [{"dtype": m.dtype, "mode": m.mode, **_row(layer)} for m in self.modes for layer in m.layers]

    def coverage(self, dtype: str | None = None) -> list[dict]:
        """The coverage matrix of ``dtype``'s run (default: the first): layer, module, op, implementation."""
        dtype = dtype or self.dtypes[0]
        if dtype not in self.dtypes:
            raise ZooError(f"this report has no {dtype} run (it has {', '.join(self.dtypes)})")
        return next((m.coverage for m in self.modes if m.dtype == dtype and m.coverage), [])

    def to_dict(self) -> dict:
        def modes(dtype):
            return {m.mode: {"passed": m.passed, "first_failure": m.first_failure, "tolerance": m.tolerance,
                             "atol": m.atol, "layers": [_row(layer) for layer in m.layers]}
                    for m in self.modes if m.dtype == dtype}

        out = {**self.header, "passed": self.passed}
        if len(self.dtypes) == 1:
            out["modes"] = modes(self.dtypes[0])
        else:
            out["by_dtype"] = {d: {"passed": all(m.passed for m in self.modes if m.dtype == d), "modes": modes(d)}
                               for d in self.dtypes}
        out["coverage"] = {d: self.coverage(d) for d in self.dtypes}
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    def to_html(self) -> str:
        return render_html(self)


def _row(layer) -> dict:
    return {**asdict(layer), "shape": list(layer.shape)}


# ---- HTML ------------------------------------------------------------------------------

CSS = """
body { font: 14px/1.4 -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 24px; color: #1d1d1f; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 28px; } h3 { font-size: 15px; }
table { border-collapse: collapse; margin: 8px 0; }
td, th { border: 1px solid #d0d0d0; padding: 2px 8px; text-align: left; font-size: 12px; }
th { background: #f2f2f2; } td.num { text-align: right; font-family: monospace; }
tr.fail td { background: #fde2e1; } tr.first td { background: #f8b4b0; font-weight: bold; }
.pass { color: #1a7f37; font-weight: bold; } .FAIL { color: #c62828; font-weight: bold; }
.banner { padding: 10px 14px; border-radius: 6px; font-size: 16px; margin: 10px 0; }
.banner.pass { background: #e6f4ea; } .banner.FAIL { background: #fde2e1; }
img { max-width: 100%; } .maps { display: flex; flex-wrap: wrap; gap: 16px; } .maps figure { margin: 0; }
"""


def _png(fig) -> str:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return f'<img alt="plot" src="data:image/png;base64,{base64.b64encode(buffer.getvalue()).decode()}">'


def pyplot():
    matplotlib = require("matplotlib", "the HTML report")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _error_plot(modes: list, dtype: str) -> str:
    """rel err per layer in execution order, one line per mode, tolerance lines, log y; the
    first failing layer marked. A layer with no finite error (NaN/Inf, shape) is drawn at the top."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(12, 4.2))
    floor = 1e-12
    top = 10.0
    colours = {"end-to-end": "#1f77b4", "isolated": "#ff7f0e"}
    for index, m in enumerate(modes):
        rows = m.compared
        x = list(range(len(rows)))
        y = [min(max(r.rel, floor), top) if math.isfinite(r.rel) else top for r in rows]
        colour = colours.get(m.mode, None)
        ax.plot(x, y, ".-", lw=0.8, ms=3, color=colour, label=f"{m.mode} rel err")
        ax.axhline(m.tolerance, ls="--", lw=1, color=colour, label=f"{m.mode} tolerance {m.tolerance:g}")
        failed = [(i, v) for i, (r, v) in enumerate(zip(rows, y)) if r.failed]
        if failed:
            ax.plot(*zip(*failed), "x", color="#c62828", ms=7, mew=2)
        if m.first_failure is not None:
            i = next(i for i, r in enumerate(rows) if r.name == m.first_failure)
            ax.axvline(i, color="#c62828", lw=1)
            ax.annotate(f"first failing ({m.mode}): {m.first_failure}", (i, y[i]), xytext=(8, -14 - 14 * index),
                        textcoords="offset points", color="#c62828", fontsize=9)
    ax.set_yscale("log")
    ax.set_ylim(floor / 2, top * 2)
    ax.set_xlabel("layer, in execution order")
    ax.set_ylabel("rel err (max abs err / max |ref|)")
    ax.set_title(f"{dtype}: relative error per layer")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return _png(fig)


def _heatmap(name: str, error) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(3.2, 3.0))
    shown = ax.imshow(error, cmap="magma", interpolation="nearest", aspect="auto")
    fig.colorbar(shown, ax=ax, shrink=0.8)
    ax.set_title(name, fontsize=8)
    ax.set_xticks([])
    ax.set_yticks([])
    return _png(fig)


def format_error(v: float) -> str:
    """An error figure as the table prints it: 3 significant digits, "-" for NaN (nothing to compare)."""
    return "-" if isinstance(v, float) and math.isnan(v) else f"{v:.2e}"


def _layer_table(modes: list) -> str:
    """One row per layer, the modes side by side; failing rows red, the first failing one darker."""
    names = list(dict.fromkeys(r.name for m in modes for r in m.layers))
    by_mode = {m.mode: {r.name: r for r in m.layers} for m in modes}
    first = {m.first_failure for m in modes} - {None}
    head = "".join(f"<th>{html.escape(m.mode)} max abs</th><th>{html.escape(m.mode)} rel err</th>"
                   f"<th>{html.escape(m.mode)} cosine</th><th>{html.escape(m.mode)}</th>" for m in modes)
    rows = []
    for i, name in enumerate(names):
        cells, flags, failed = [], [], False
        shape = ""
        for m in modes:
            r = by_mode[m.mode].get(name)
            if r is None:
                cells.append("<td></td>" * 4)
                continue
            shape = "x".join(map(str, r.shape))
            failed |= r.failed
            flags += [f"{m.mode}: {f}" for f in r.flags]
            cosine = "-" if math.isnan(r.cosine) else f"{r.cosine:.7f}"
            cells.append(f'<td class="num">{format_error(r.max_abs)}</td><td class="num">{format_error(r.rel)}</td>'
                         f'<td class="num">{cosine}</td><td class="{html.escape(r.status)}">{html.escape(r.status)}</td>')
        cls = "first" if name in first else "fail" if failed else ""
        anchor = f' id="first-{html.escape(modes[0].dtype)}"' if name in first else ""
        rows.append(f'<tr class="{cls}"{anchor}><td class="num">{i}</td><td>{html.escape(name)}</td><td>{shape}</td>'
                    f'{"".join(cells)}<td>{html.escape("; ".join(flags))}</td></tr>')
    return (f"<table><tr><th>#</th><th>layer</th><th>shape</th>{head}<th>flags</th></tr>"
            + "\n".join(rows) + "</table>")


def coverage_counts(rows: list[dict]) -> dict[tuple[str, str], int]:
    """How many layers ran each (op, implementation) of a coverage matrix, sorted by op."""
    return dict(sorted(Counter((r["op"], r["implementation"]) for r in rows).items()))


def _coverage_section(rows: list[dict]) -> str:
    summary = "".join(f"<tr><td>{html.escape(op)}</td><td>{html.escape(impl)}</td><td class='num'>{n}</td></tr>"
                      for (op, impl), n in coverage_counts(rows).items())
    detail = "".join(f"<tr><td>{html.escape(r['layer'])}</td><td>{html.escape(r['module'])}</td>"
                     f"<td>{html.escape(r['op'])}</td><td>{html.escape(r['implementation'])}</td></tr>" for r in rows)
    return (f"<table><tr><th>op</th><th>implementation</th><th>layers</th></tr>{summary}</table>"
            f"<details><summary>per layer ({len(rows)} rows)</summary><table><tr><th>layer</th><th>module</th>"
            f"<th>op</th><th>implementation</th></tr>{detail}</table></details>")


def render_html(report: Report) -> str:
    head = report.header
    env = {
        "model": head.get("model"), "weights": head.get("weights"), "reference": head.get("reference"),
        "device": head.get("device"),
        "dtype": ", ".join(report.dtypes), "TF32": "on" if head.get("tf32") else "off", "MLX": head.get("mlx"),
        "numpy": head.get("numpy"), "python": head.get("python"), "input": head.get("input"),
        "injected fault": head.get("inject") or "none",
        "ops the float64 reference computes in float32 precision": ", ".join(head.get("reference_float32_precision") or [])
        or None,
        "written": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }
    env_rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>"
                       for k, v in env.items() if v is not None)
    status = "pass" if report.passed else "FAIL"
    verdict = "PASS: every layer within its tolerance" if report.passed else \
        f"FAIL: first failing layer <b>{html.escape(report.first_failure)}</b> ({html.escape(report.failing.dtype)}, " \
        f"{html.escape(report.failing.mode)})"
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>zoo.validate {html.escape(str(head.get('model')))}"
             f"</title><style>{CSS}</style></head><body>",
             f"<h1>Layer parity: {html.escape(str(head.get('model')))} (MLX vs "
             f"{html.escape(head.get('reference', 'float64 numpy reference'))})</h1>",
             f"<div class='banner {status}'>{verdict}</div>",
             f"<h2>Environment</h2><table>{env_rows}</table>",
             "<h2>Summary</h2><table><tr><th>dtype</th><th>mode</th><th>result</th><th>layers within tolerance</th>"
             "<th>tolerance</th><th>worst rel err</th><th>first failing layer</th></tr>"]
    for m in report.modes:
        compared, worst = m.compared, m.worst
        parts.append(f"<tr><td>{m.dtype}</td><td>{m.mode}</td><td class='{'pass' if m.passed else 'FAIL'}'>"
                     f"{'PASS' if m.passed else 'FAIL'}</td><td class='num'>{sum(not r.failed for r in compared)}/"
                     f"{len(compared)}</td><td class='num'>{html.escape(m.bound)}</td><td>"
                     f"{'' if worst is None else format_error(worst.rel) + ' at ' + html.escape(worst.name)}</td>"
                     f"<td>{html.escape(m.first_failure or '-')}</td></tr>")
    parts.append("</table>")
    for dtype in report.dtypes:
        modes = [m for m in report.modes if m.dtype == dtype]
        parts.append(f"<h2>{dtype}</h2><h3>Relative error per layer</h3>{_error_plot(modes, dtype)}")
        maps = [(m, name, error) for m in modes for name, error in m.heatmaps.items()]
        if maps:
            parts.append("<h3>Where the error sits (|got - ref|, max over channels)</h3><div class='maps'>")
            parts.extend(f"<figure>{_heatmap(f'{m.mode}: {name}', error)}<figcaption>{html.escape(m.mode)}: "
                         f"{html.escape(name)}</figcaption></figure>" for m, name, error in maps)
            parts.append("</div>")
        parts.append(f"<h3>Per layer</h3>{_layer_table(modes)}")
        parts.append(f"<h3>Coverage: the implementation each layer ran on {html.escape(str(head.get('device')))}</h3>"
                     f"{_coverage_section(report.coverage(dtype))}")
    parts.append("</body></html>")
    return "\n".join(parts)
