"""zoo.validate.compare / assert_close / compare_torch / --module on models written for these tests
(tests/any_models.py). The GPU half, the custom kernel's GPU-only fault, is tests/gpu/ (run by hand
on a GPU machine: docs/validate-any-model.md)."""
import json
import subprocess
import sys

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from PIL import Image

import any_models
import zoo.validate
from zoo.cli.validate import main as validate_main
from zoo.errors import UsageError, ZooError
from zoo.validate import modules, torch_port
from zoo.validate.capture import submodules


@pytest.fixture(scope="module", params=sorted(any_models.FACTORIES))
def case(request):
    """(name, model, inputs on the host, its float64 reference with inputs kept)."""
    name = request.param
    model = any_models.FACTORIES[name]()
    host = modules.inputs_on_host(any_models.inputs(name))
    with modules.evaluation_mode(model):
        reference = modules.reference_pass(model, host, mx.float64, keep_inputs=True)
    return name, model, host, reference


def test_correct_models_pass_on_the_cpu_in_float32_and_float16(case):
    name, model, _, _ = case
    report = zoo.validate.compare(model, *any_models.inputs(name), device="cpu", dtype=["float32", "float16"])
    assert report.passed, (name, report.first_failure)
    assert [(m.dtype, m.mode) for m in report.modes] == [
        ("float32", "end-to-end"), ("float32", "isolated"), ("float16", "end-to-end"), ("float16", "isolated")]
    called = {key for key, calls in case[3].calls.items()}
    rows = {r.name.split("/")[0].split("#")[0] for r in report.modes[0].compared}
    assert rows == called | {"output"}
    assert report.modes[2].worst.rel > 1e-4  # float16 really ran in float16


def test_a_fault_in_any_called_leaf_is_the_first_failure_in_isolated_mode(case):
    name, model, host, reference = case
    found = dict(submodules(model))
    leaves = [n for n in reference.calls if not any(o.startswith(n + ".") for o in found)]
    assert len(leaves) >= 4
    with modules.evaluation_mode(model):
        for leaf in leaves:
            report = modules.test_pass(model, host, reference, mx.cpu, "float32", "isolated", (leaf, "noise"))
            assert report.first_failure.split("/")[0].split("#")[0] == leaf, (name, leaf)
            assert all(r.name.split("/")[0].split("#")[0] in {leaf, "output"} or leaf.startswith(r.name.split("#")[0])
                       for r in report.layers if r.failed), (name, leaf)  # only it and the blocks holding it


def test_rows_are_module_calls_and_output_parts():
    model = any_models.conv_net()
    report = zoo.validate.compare(model, *any_models.inputs("conv_net"), mode="end-to-end")
    names = [r.name for r in report.modes[0].layers]
    # completion order; a module called twice is two rows; modules in a list and a dict are found
    assert names == ["stem", "bn", "act#0", "blocks.0", "act#1", "blocks.1", "heads.pool", "heads.fc", "output"]
    depthwise = report.modes[0].layers[5]
    assert depthwise.status == "pass" and depthwise.flags[0].startswith("reference in float32: float64 raised")

    tower = zoo.validate.compare(any_models.vision_tower(), *any_models.inputs("vision_tower"), mode="end-to-end")
    outputs = [r.name for r in tower.modes[0].layers if r.name.startswith("output")]
    assert outputs == ["output/pooled", "output/last_hidden_state", "output/hidden_states/0", "output/hidden_states/1"]
    assert json.loads(tower.to_json())["reference"] == "cpu-float64 (the same MLX model)"


def test_the_model_is_left_as_it_was():
    model = any_models.unet()
    model.train()
    before = {k: (v, np.array(v)) for k, v in dict(_flat(model)).items()}
    classes = {n: type(m) for n, m in submodules(model)}
    zoo.validate.compare(model, *any_models.inputs("unet"), dtype="float16", inject="mid.0.conv1=noise")
    after = dict(_flat(model))
    assert after.keys() == before.keys()
    assert all(after[k] is v and after[k].dtype == mx.float32 and np.array_equal(np.array(after[k]), a)
               for k, (v, a) in before.items())
    assert {n: type(m) for n, m in submodules(model)} == classes
    assert model.training and all(m.training for _, m in submodules(model))


def _flat(model):
    from mlx.utils import tree_flatten

    return tree_flatten(model.parameters())


def test_the_custom_kernel_fault_is_absent_on_the_cpu():
    """On the CPU KernelAdd runs MLX's add: the model passes, and the coverage says which add ran.
    On a GPU its kernel drops the second operand: tests/gpu/test_validate_any_gpu.py."""
    report = zoo.validate.compare(any_models.kernel_net(), *any_models.inputs("kernel_net"), device="cpu")
    assert report.passed
    assert {"layer": "add", "module": "KernelAdd", "op": "add", "implementation": "MLX op"} in report.coverage()


def test_tolerances_are_the_dtypes_and_overridable():
    model, x = any_models.causal_lm(), any_models.inputs("causal_lm")
    report = zoo.validate.compare(model, *x, dtype="float16", mode="isolated")
    assert report.passed and report.modes[0].tolerance == 1e-2
    strict = zoo.validate.compare(model, *x, dtype="float16", mode="isolated", rtol=1e-6)
    assert not strict.passed and strict.modes[0].tolerance == 1e-6
    assert zoo.validate.compare(model, *x, dtype="float16", mode="isolated", rtol=1e-6, atol=1.0).passed
    with pytest.raises(AssertionError, match=r"first failing layer layers\.1\.mlp\.fc2 \(float32, isolated\)"):
        zoo.validate.assert_close(model, *x, mode="isolated", inject="layers.1.mlp.fc2=zero")


def test_bad_input_is_one_error_naming_the_fix():
    model, x = any_models.conv_net(), any_models.inputs("conv_net")
    with pytest.raises(UsageError, match="takes an mlx.nn.Module, got function"):
        zoo.validate.compare(lambda v: v, *x)
    with pytest.raises(UsageError, match=r"stem \(Conv2d\), in the reference pass, raised ValueError.*argument 0 \(1, 3, 8, 8\).*NHWC"):
        zoo.validate.compare(model, np.zeros((1, 3, 8, 8), np.float32))
    with pytest.raises(UsageError, match=r"raised.*argument 0 \(8, 8, 3\)"):
        zoo.validate.compare(model, np.zeros((8, 8, 3), np.float32))  # rank 3 where 4 is taken
    with pytest.raises(UsageError, match="no module named 'blocks.7'.*pass one of the model's module paths"):
        zoo.validate.compare(model, *x, inject="blocks.7=zero")
    with pytest.raises(UsageError, match="no inputs"):
        zoo.validate.compare(model)
    with pytest.raises(UsageError, match="reference 'gpu-float64'"):
        zoo.validate.compare(model, *x, reference="gpu-float64")
    with pytest.raises(ZooError, match="called embeddings.positions 0 time"):
        zoo.validate.compare(any_models.vision_tower(), *any_models.inputs("vision_tower"),
                             inject="embeddings.positions=zero")


def test_command_line(tmp_path, capsys):
    out = tmp_path / "r.json"
    argv = ["--module", "tests/any_models.py:unet", "--input", "1,8,8,4", "--input", "1", "--input", "1,3,6"]
    assert validate_main([*argv, "--json", str(out), "--show", "failures"]) == 0
    assert "isolated: PASS 34/34" in capsys.readouterr().out
    assert json.loads(out.read_text())["passed"]
    assert validate_main([*argv, "--mode", "isolated", "--inject", "up.conv2=noise"]) == 1
    assert "first failing layer: up.conv2" in capsys.readouterr().out
    assert validate_main(["--module", "any_models:kernel_net", "--input", "1,8,8,3", "--mode", "isolated"]) == 0
    assert "isolated: PASS 5/5" in capsys.readouterr().out
    assert validate_main(["--module", "tests/any_models.py:nothing", "--input", "1,8,8,3"]) == 2
    assert validate_main(["--module", "tests/any_models.py:conv_net", "--input", "1,8,x"]) == 2
    errors = capsys.readouterr().err.splitlines()
    assert errors == ["error: --module tests/any_models.py:nothing: tests/any_models.py has no function nothing: "
                      "name one that returns the model",
                      "error: --input '1,8,x': use SHAPE[:int32[:HIGH]], e.g. 1,224,224,3 or 1,77:int32:49408"]


# ---- compare_torch without torch: PyTorch's side stood in for by the MLX model's own float64
# reference, moved to PyTorch's layouts and names ---------------------------------------------


def as_torch(reference, parameters, prefix="net."):
    """``reference`` and MLX ``parameters`` as record_torch would give them for a PyTorch twin
    whose paths start with ``prefix``: 4-D values NCHW, conv weights (O, I, kH, kW)."""
    def nchw(values):
        return {p: np.moveaxis(v, -1, 1) if v.ndim == 4 else v for p, v in values.items()}

    calls = {prefix + name: [modules.ReferenceCall(nchw(c.output), None if c.inputs is None else nchw(c.inputs))
                             for c in entries] for name, entries in reference.calls.items()}
    calls[prefix + "dropout"] = [modules.ReferenceCall({"": np.zeros(3)})]  # a layer the port does not have
    weights = {prefix + k: np.moveaxis(np.array(v), -1, 1) if v.ndim == 4 else np.array(v) for k, v in parameters}
    weights[prefix + "bn.num_batches_tracked"] = np.array(3)
    return torch_port.Recorded(calls, modules.ReferenceCall(reference.output.output), weights)


def test_torch_pairing_layouts_and_weights_on_recorded_arrays():
    model = any_models.conv_net()
    host = modules.inputs_on_host(any_models.inputs("conv_net"))
    with modules.evaluation_mode(model):
        reference = modules.reference_pass(model, host, mx.float64, keep_inputs=True)
    recorded = as_torch(reference, _flat(model))
    rename = torch_port.renamer({"net": ""})
    paired, unpaired = torch_port.pair(recorded, [n for n, _ in submodules(model)], rename)
    assert unpaired == ["net.dropout"] and set(paired.calls) == set(reference.calls)
    align = torch_port.aligner("auto")
    with modules.evaluation_mode(model):
        for mode in ("end-to-end", "isolated"):
            report = modules.test_pass(model, host, paired, mx.cpu, "float32", mode, align=align)
            assert report.passed and not any("not fed" in r.flags for r in report.layers), mode
    params = torch_port.parameter_report(recorded.parameters, model, rename, "float32")
    assert params.passed and len(params.compared) == 12
    recorded.parameters["net.stem.weight"] = recorded.parameters["net.stem.weight"].swapaxes(2, 3)  # a port's bug
    assert torch_port.parameter_report(recorded.parameters, model, rename, "float32").first_failure == "stem.weight"
    rows = torch_port.unpaired_rows(unpaired)
    assert [(r.name, r.status) for r in rows] == [("net.dropout", "n/a")]
    # no weight paired (a name_map left out): the n/a rows alone are no pass
    unmapped = torch_port.parameter_report(recorded.parameters, model, torch_port.renamer(None), "float32")
    assert unmapped.first_failure == "parameters" and "name_map=" in unmapped.layers[0].flags[0]


def test_torch_names_and_layouts():
    rename = torch_port.renamer({"features": "layers", "features.0": "stem", "classifier.1": "head", "aux": None})
    assert [rename(p) for p in ("features.0.weight", "features.3", "classifier.1.bias", "aux.fc", "featuresx")] == \
        ["stem.weight", "layers.3", "head.bias", None, "featuresx"]
    align = torch_port.aligner("auto")
    nchw = np.arange(2 * 3 * 4 * 5, dtype=float).reshape(2, 3, 4, 5)
    assert np.array_equal(align(nchw, (2, 4, 5, 3), "x")[0], np.moveaxis(nchw, 1, -1))
    tokens = np.ones((1, 7, 16))
    assert align(tokens, (1, 7, 16), "x") == (tokens, None)  # (B, N, C) as it is
    assert align(np.arange(8.0).reshape(1, 2, 2, 2), (1, 2, 2, 2), "x")[1] == "layout ambiguous: taken as NCHW -> NHWC"
    with pytest.raises(ValueError, match="no layout"):
        align(nchw, (2, 3, 5, 4), "x")
    same = torch_port.aligner({"head.*": "same", "*": "channels-last"})
    assert same(tokens, (1, 7, 16), "head.fc")[0] is tokens
    with pytest.raises(ValueError):
        same(tokens, (1, 7, 16), "body")
    with pytest.raises(UsageError, match="layout 'nchw'"):
        torch_port.aligner("nchw")
    assert [a.shape for a in torch_port.torch_inputs((nchw, tokens), "auto")] == [(2, 5, 3, 4), (1, 7, 16)]
    # a Conv1d port: its NLC input goes to PyTorch as NCL with "channels-last" (PyTorch raised on the NLC one)
    assert [a.shape for a in torch_port.torch_inputs((nchw, tokens), "channels-last")] == [(2, 5, 3, 4), (1, 16, 7)]
    square = np.arange(2 * 8 * 8, dtype=float).reshape(2, 8, 8)  # NCL with L == C: as it is, said in the row
    assert align(square, (2, 8, 8), "x")[1] == "layout ambiguous: taken as it is (pass layout='channels-last' for NCL)"


def test_html_report_names_the_reference():
    report = zoo.validate.compare(any_models.kernel_net(), *any_models.inputs("kernel_net"), mode="isolated",
                                  inject="conv=zero")
    page = report.to_html()
    assert "MLX vs cpu-float64 (the same MLX model)" in page and "first failing layer <b>conv</b>" in page



def near_tie_classifier():
    """logits and the class: classes 40 and 48 score 1.0 and 1.001, which bfloat16 cannot tell apart."""
    import mlx.nn as nn

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.head = nn.Linear(4, 50, bias=False)
            weight = np.zeros((50, 4), np.float32)
            weight[40, 0], weight[48, 0] = 1.0, 1.001
            self.head.weight = mx.array(weight)

        def __call__(self, x):
            logits = self.head(x)
            return logits, mx.argmax(logits, axis=-1)

    return Classifier()


def test_integer_outputs_must_be_equal():
    """class 40 for class 48 is rel err 0.17, within bfloat16's end-to-end 0.2: integers are compared exactly"""
    x = mx.array([[1.0, 0.0, 0.0, 0.0]])
    report = zoo.validate.compare(near_tie_classifier(), x, dtype="bfloat16", mode="end-to-end")
    rows = {r.name: r for r in report.modes[0].layers}
    assert rows["head"].status == "pass" and rows["output/0"].status == "pass"
    assert rows["output/1"].failed and rows["output/1"].flags == ["1 of 1 integer values differ"]
    assert report.first_failure == "output/1"
    assert zoo.validate.compare(near_tie_classifier(), x, dtype="float32").passed  # the same class in float32


def test_the_tolerance_text_names_atol(tmp_path, capsys):
    argv = ["--module", "tests/any_models.py:conv_net", "--input", "1,8,8,3", "--mode", "isolated",
            "--inject", "heads.fc=noise", "--atol", "100"]
    assert validate_main([*argv, "--report", str(tmp_path / "r.html")]) == 0  # every layer within the atol
    out = capsys.readouterr().out
    assert "(tolerance: max abs err <= 100 + 0.0001 x max |ref|)" in out
    assert "isolated: PASS 9/9 layers within max abs err <= 100 + 0.0001 x max |ref|" in out
    assert "max abs err &lt;= 100 + 0.0001 x max |ref|" in (tmp_path / "r.html").read_text()
    with pytest.raises(AssertionError, match=r"first failing layer heads\.fc \(float32, isolated\): "
                                             r"max abs err \S+ > 1e-06 \+ 0\.0001 x max \|ref\|"):
        zoo.validate.assert_close(any_models.conv_net(), *any_models.inputs("conv_net"), mode="isolated",
                                  inject="heads.fc=noise", atol=1e-6)


def test_json_and_report_on_one_file_is_refused(tmp_path, capsys):
    out = tmp_path / "r.json"
    argv = ["--module", "tests/any_models.py:conv_net", "--input", "1,8,8,3", "--json", str(out)]
    assert validate_main([*argv, "--report", str(tmp_path / "." / "r.json")]) == 2
    assert capsys.readouterr().err.startswith(f"error: --json and --report both name {tmp_path}")
    assert not out.exists()


def test_what_a_call_caches_on_its_module_stays_in_its_pass():
    """a table cached at the first call in that call's dtype (rotary tables, attention masks): the
    reference's float64 one made the float16 pass compute in float64, and stayed on the user's model"""
    import mlx.nn as nn

    built = []

    class CachedTable(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(8, 8)
            self._table = None

        def __call__(self, x):
            h = self.proj(x)
            if self._table is None:
                self._table = mx.cos(mx.arange(x.shape[1])[:, None] * mx.ones((1, 8))).astype(h.dtype)
                built.append(self._table.dtype)
            return h * self._table

    model = CachedTable()
    report = zoo.validate.compare(model, mx.random.normal((1, 5, 8)), dtype="float16")
    assert report.passed and built == [mx.float64, mx.float16, mx.float16]  # the reference, then each mode
    assert model._table is None


def test_a_model_file_is_imported_as_python_runs_it(tmp_path, monkeypatch, capsys):
    """its sibling imports resolve from any working folder, and a module-level argparse takes its defaults
    (it raised ModuleNotFoundError, and the argparse read the validator's options: 'unrecognized arguments')"""
    (tmp_path / "sibling_blocks.py").write_text("import mlx.nn as nn\n\ndef block():\n    return nn.Linear(8, 4)\n")
    (tmp_path / "net.py").write_text(
        "import argparse\nfrom sibling_blocks import block\n\nparser = argparse.ArgumentParser()\n"
        "parser.add_argument('--width', type=int, default=8)\nargs = parser.parse_args()\n\n"
        "def build():\n    return block()\n")
    monkeypatch.chdir(tmp_path.parent)
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert validate_main(["--module", f"{tmp_path.name}/net.py:build", "--input", "1,8", "--mode", "isolated"]) == 0
    assert "isolated: PASS 1/1" in capsys.readouterr().out
    (tmp_path / "strict.py").write_text(
        "import argparse\nparser = argparse.ArgumentParser()\nparser.add_argument('--width', required=True)\n"
        "parser.parse_args()\n")
    assert validate_main(["--module", f"{tmp_path.name}/strict.py:build", "--input", "1,8"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: --module {tmp_path.name}/strict.py:build: importing {tmp_path.name}/strict.py exited (code 2): it "
        "reads a command line of its own when imported; move that under `if __name__ == '__main__':`")
    for name in ("net", "sibling_blocks", "strict"):
        sys.modules.pop(name, None)


def test_a_users_json_py_or_copy_py_never_takes_the_standard_librarys_place(tmp_path):
    """python -m puts the current folder first on sys.path, and --module FILE.py its folder: a json.py there was the
    json module of every import after (python -m zoo.run and zoo.validate: 'internal error (AttributeError: module
    'json' has no attribute 'dumps')', the report lost), and a model file named copy.py replaced the copy module."""
    net = "import mlx.nn as nn\n\ndef build():\n    return nn.Linear(8, 4)\n"
    (tmp_path / "copy.py").write_text(net)
    (tmp_path / "json.py").write_text("# a user's own script\n")
    (tmp_path / "program").mkdir()
    (tmp_path / "program" / "check.py").write_text(  # a user's program: its copy module stays the standard library's
        "import sys\nfrom zoo.cli.validate import main\n"
        "code = main(['--module', 'copy.py:build', '--input', '1,8', '--device', 'cpu', '--mode', 'isolated', "
        "'--json', 'report.json'])\nimport copy\nsys.exit(code or copy.deepcopy(0))\n")
    Image.fromarray(np.zeros((40, 40, 3), np.uint8)).save(tmp_path / "a.png")
    for command in (["-m", "zoo.validate", "--module", "copy.py:build", "--input", "1,8", "--device", "cpu",
                     "--mode", "isolated", "--json", "report.json"],
                    ["-m", "zoo.run", "resnet18", "a.png", "--weights", "synthetic", "--json", "top.json"]):
        done = subprocess.run([sys.executable, *command], cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0 and "error:" not in done.stderr, done.stderr
    assert json.loads((tmp_path / "report.json").read_text())["passed"]
    assert json.loads((tmp_path / "top.json").read_text())
    (tmp_path / "report.json").unlink()
    done = subprocess.run([sys.executable, "program/check.py"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0 and (tmp_path / "report.json").exists(), done.stderr


def test_a_report_never_replaces_the_models_source(tmp_path, monkeypatch, capsys):
    """--json model.py --overwrite wrote the JSON over the user's model file"""
    source = tmp_path / "mynet.py"
    source.write_text("import mlx.nn as nn\n\ndef build():\n    return nn.Linear(4, 2)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    for module, flag in (("mynet.py:build", "--json"), ("mynet:build", "--report")):
        assert validate_main(["--module", module, "--input", "1,4", flag, "mynet.py", "--overwrite"]) == 2
        assert "is the input file" in capsys.readouterr().err
    assert source.read_text().startswith("import mlx.nn")
    sys.modules.pop("mynet", None)


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def __call__(self, x):
        return self.fc(x)


class NaNHead(Head):
    """A model whose output is NaN on every device and in every dtype (a 0/0 after its head)."""

    def __call__(self, x):
        return self.fc(x) * 0 / 0


class Count(nn.Module):
    def __call__(self, x):
        return x.shape[0]


def test_a_model_of_nan_outputs_or_of_no_arrays_never_passes():
    """compare said PASS for a model returning NaN everywhere (no element compared: rel err 0), and PASS 0/0 layers
    for one returning a number and calling no module."""
    report = zoo.validate.compare(NaNHead(), np.ones((1, 4), np.float32))
    assert not report.passed and report.first_failure == "output"
    assert report.failing.layers[-1].flags == ["2 of 2 reference values NaN"]
    with pytest.raises(UsageError, match=r"the model \(Count\) returned int and none of its module calls gave an "
                                         "array with elements: nothing to compare"):
        zoo.validate.compare(Count(), np.ones((1, 4), np.float32))
    with pytest.raises(UsageError, match="gave an array with elements: nothing to compare"):
        zoo.validate.compare(Head(), np.ones((0, 4), np.float32))  # every layer of no element: PASS before


def test_dtypes_tolerances_and_faults_in_the_apis_forms():
    """dtype=mx.float16 (zoo.load's form) and dtype=None were TypeErrors, ['float16', 'float16'] ran twice; rtol as
    a numpy float was 'pass a non-negative number'; inject=5 was an AttributeError, and a fault naming no module
    said '--inject', a flag, to a Python caller."""
    model, x = Head(), np.ones((1, 4), np.float32)
    report = zoo.validate.compare(model, x, dtype=[mx.float16, "float16"], mode="isolated", rtol=np.float32(1e-2))
    assert [(m.dtype, m.tolerance) for m in report.modes] == [("float16", pytest.approx(1e-2))]
    with pytest.raises(UsageError, match="dtype None: use float32, float16, bfloat16 or all"):
        zoo.validate.compare(model, x, dtype=None)
    with pytest.raises(UsageError, match="bad inject=5: use NAME=KIND"):
        zoo.validate.compare(model, x, inject=5)
    with pytest.raises(ZooError, match=r"^inject='head=zero': no module named 'head'"):
        zoo.validate.compare(model, x, inject="head=zero")
    with pytest.raises(ZooError, match=r"^inject='fc#1=zero': the model called fc 1 time\(s\)"):
        zoo.validate.compare(model, x, inject="fc#1=zero")


def test_compare_torch_names_its_own_mistakes():
    """compare_torch(torch_model, mlx_model, x), the two swapped, was told 'compare takes an mlx.nn.Module ... use
    compare_torch'; a name_map function returning an int paired no layer and the report passed on the output alone."""
    torch_like = type("Linear", (), {"__module__": "torch.nn.modules.linear"})()
    with pytest.raises(UsageError, match="^compare_torch takes the MLX model first, got a PyTorch Linear: call "
                                         r"compare_torch\(mlx_model, torch_model, \*inputs\)"):
        zoo.validate.compare_torch(torch_like, Head(), np.ones((1, 4), np.float32))
    with pytest.raises(UsageError, match=r"^name_map\('features.0'\) returned int 5: return the MLX path"):
        torch_port.renamer(lambda path: 5)("features.0")
    assert torch_port.renamer(lambda path: path.replace("features", "layers"))("features.0") == "layers.0"


class Backed(Head):
    """A block holding its parent, as some ports do for a shared table (self.block.parent = self)."""

    def __init__(self):
        super().__init__()
        self.block = Head()
        self.block.parent = self

    def __call__(self, x):
        return self.block(x)


def test_a_module_holding_its_parent_is_one_error_not_a_hang():
    """compare(model, x) of a model whose block holds its parent never returned: MLX's model.eval() walked the cycle
    without end (its parameters() raises RecursionError)."""
    with pytest.raises(UsageError, match=r"^compare: the model's block.parent is a module that contains it .*a "
                                         r"weakref.ref\)$"):
        zoo.validate.compare(Backed(), np.ones((1, 4), np.float32))
    shared = Head()
    shared.twin = shared.fc  # the same module under two names is no cycle
    assert zoo.validate.compare(shared, np.ones((1, 4), np.float32)).passed
