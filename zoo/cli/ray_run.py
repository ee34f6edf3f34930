"""``python -m zoo.run MODEL INPUT... --ray``: a classify, detect, segmentation or pose model over images
with Ray Data.

    python -m zoo.run resnet50 photos/ --ray --out results/               # a local Ray cluster
    python -m zoo.run yolov8n s3://bucket/photos/ --ray --ray-address auto --format jsonl

Writes ``<out>/predictions.parquet`` (or ``.jsonl``), one row per image, in the columns of
zoo.ray's Classifier, Detector, InstanceSegmenter or PoseEstimator; rows arrive as the actors finish them and the file appears
whole when the run ends (written under a temporary name, renamed). A bad image is one warning
line and one row with its ``error``; the exit code is 1 when any image failed.
"""
from __future__ import annotations

import functools
import logging
import os
import re
import sys
import tempfile
import warnings
from contextlib import contextmanager, nullcontext
from pathlib import Path

from zoo import ray as zoo_ray
from zoo import registry
from zoo.cli import ArgumentParser, add_model_arguments, runs_folder, usage_errors
from zoo.errors import UsageError, ZooError
from zoo.files import Inputs, check_output_file, increment_path, json_text, lock_output_folder, write_atomic
from zoo.registry import is_weights_file

# the YOLO tasks: detection's options and columns, and a segmentation model's masks / a pose model's keypoints
YOLO_TASKS = ("detect", "instance-segment", "pose")
TASKS = ("classify", *YOLO_TASKS)
# what the in-process commands' --help says of --ray, whose options are its own (a newcomer found no word of it)
RAY_NOTE = ('--ray: run on Ray Data instead, on this machine or a cluster (pip install "mlx-zoo[ray]"); '
            "python -m zoo.run MODEL --ray --help shows its options (docs/ray.md)")


def parser_for(spec) -> ArgumentParser:
    parser = ArgumentParser(prog="python -m zoo.run", description=f"{spec.name}: {spec.task} with Ray Data",
                            help_command=f"python -m zoo.run {spec.name} --ray")
    parser.add_argument("model")
    add_model_arguments(parser)
    parser.add_argument("images", nargs="+", help="image files, folders, globs, .txt/.csv lists, or one URI "
                        "Ray reads (s3://bucket/photos/)")
    parser.add_argument("--ray", action="store_true", required=True, help="run with Ray Data")
    parser.add_argument("--ray-address", metavar="ADDRESS",
                        help="the cluster to join: auto (the one `ray start` began here), ray://host:10001, "
                             "host:6379; default: RAY_ADDRESS, else a local cluster of this machine's CPUs")
    parser.add_argument("--actors", type=int, help="model copies (Ray actors); default: one per CPU of the cluster")
    parser.add_argument("--actor-cpus", type=float, default=zoo_ray.ACTOR_CPUS,
                        help=f"CPUs each actor asks for (default {zoo_ray.ACTOR_CPUS}: reads get the rest)")
    parser.add_argument("--actor-gpus", type=float, default=0, help="GPUs each actor asks for (default 0)")
    parser.add_argument("--batch", type=int, default=1, help="images per forward pass (default 1: the results "
                        "of one-at-a-time runs; more is faster on a GPU and differs in float rounding)")
    parser.add_argument("--recursive", action="store_true", help="look in sub-folders too")
    parser.add_argument("--out", metavar="DIR", help=f"folder for predictions.parquet/.jsonl (default: a new "
                        f"{runs_folder(spec.task)}/ray, ray2, ...)")
    parser.add_argument("--format", choices=("parquet", "jsonl"), default="parquet")
    parser.add_argument("--overwrite", "--exist-ok", dest="overwrite", action="store_true",
                        help="replace a predictions file that exists (inputs are never replaced)")
    if spec.task == "classify":
        from zoo.cli.classify import add_model_options

        add_model_options(parser)
    if spec.task in YOLO_TASKS:
        parser.add_argument("--conf", type=float, default=0.25)
        parser.add_argument("--iou", type=float, default=0.7)
        parser.add_argument("--classes", help="only these classes: comma-separated names or ids")
        parser.add_argument("--agnostic-nms", action="store_true")
        parser.add_argument("--max-det", type=int, default=300)
        parser.add_argument("--imgsz", type=int, nargs="+", metavar="SIZE")
    if spec.task == "instance-segment":
        parser.add_argument("--retina-masks", action="store_true", help="masks computed at the image's size "
                            "(default: at the letterboxed input's, then scaled to the image, as ultralytics)")
    return parser


def schema_for(task: str):
    """The predictions' Arrow columns, fixed per task: every batch is cast to them (a batch without
    any box would otherwise make its list columns null-typed)."""
    import pyarrow as pa

    detect = [("boxes", pa.list_(pa.list_(pa.float64()))), ("conf", pa.list_(pa.float64())),
              ("cls", pa.list_(pa.int64())), ("names", pa.list_(pa.string()))]
    rle = pa.struct([("size", pa.list_(pa.int64())), ("counts", pa.string())])
    columns = {"classify": [("label", pa.int64()), ("name", pa.string()), ("prob", pa.float64())],
               "detect": detect,
               "instance-segment": [*detect, ("masks", pa.list_(rle))],
               "pose": [*detect, ("keypoints", pa.list_(pa.list_(pa.list_(pa.float64()))))]}[task]
    return pa.schema([("path", pa.string()), *columns, ("error", pa.string())])


def main(spec, argv: list[str]) -> int:
    if spec.task not in zoo_ray.CLASSES:
        raise UsageError(f"{spec.name} ({spec.task}) does not run on Ray yet: run it without --ray")
    if spec.task not in TASKS:
        raise UsageError(f"--ray runs classify, detect, segmentation and pose models from the command line; "
                         f"{spec.name} ({spec.task}) runs on Ray through zoo.ray.{zoo_ray.CLASSES[spec.task].__name__} "
                         "in Python (docs/ray.md)")
    args = parser_for(spec).parse_args(argv)
    if is_weights_file(args.model):  # python -m zoo.run best.pt ... --ray: the family's name, the file as weights
        registry.refuse_second_checkpoint(args.model, args.weights)
        args.model, args.weights = spec.name, args.model
    if args.actors is not None and args.actors < 1:
        raise UsageError(f"--actors {args.actors} must be 1 or more")
    if args.batch < 1:
        raise UsageError(f"--batch {args.batch} must be 1 or more")
    uri = len(args.images) == 1 and zoo_ray.is_uri(args.images[0])
    inputs = args.images[0] if uri else zoo_ray.image_paths(args.images, args.recursive)
    out = Path(args.out) if args.out else increment_path(f"{runs_folder(spec.task)}/ray")
    given = Inputs([] if uri else [*args.images, *inputs, args.weights])
    # locked as a local run's --out, before its file is checked, until the run ends (zoo.cli.guarded releases it):
    # the actors only hand their rows back, and this process writes the one file, so a second run into the
    # folder, inside it or around it stops in one line instead of replacing the file or mixing its own in
    path = check_output_file(lock_output_folder(out, "--out", given) / f"predictions.{args.format}", "output",
                             given, args.overwrite)
    ray = zoo_ray.import_ray()  # missing: one line before any work (after the checks of the command line)
    started = not ray.is_initialized()
    given_as = "--ray-address" if args.ray_address is not None else "RAY_ADDRESS"
    address = args.ray_address if args.ray_address is not None else os.environ.get("RAY_ADDRESS")
    if started:  # a head answers at the address given, in seconds (Ray's client waits minutes, deaf to SIGTERM)
        zoo_ray.check_address(address, given_as)
    if uri:  # the storage answers (endpoint, credentials, bucket), before the model or the cluster starts
        zoo_ray.check_uri(inputs)
    options = {"batch": args.batch}
    if spec.task == "classify":
        from zoo.cli.classify import model_options

        options.update(model_options(args))
    if spec.task in YOLO_TASKS:
        from zoo.models.yolov8 import check_imgsz, check_thresholds

        with usage_errors():  # the actors would each fail on them
            check_thresholds(args.conf, args.iou, args.max_det)
            imgsz = None if not args.imgsz else check_imgsz(args.imgsz[0] if len(args.imgsz) == 1 else tuple(args.imgsz))
        options.update(conf=args.conf, iou=args.iou, classes=args.classes, agnostic_nms=args.agnostic_nms,
                       max_det=args.max_det, imgsz=imgsz)
    if spec.task == "instance-segment":
        options["retina_masks"] = args.retina_masks
    weights = args.weights or registry.default_weights(spec)  # ZOO_WEIGHTS: said once, here, not per actor
    fetch_weights(spec, weights)
    if started:
        joining = address is not None
        if not joining:
            # a local cluster of our own: its workers at this process's priority, as the in-process loop
            # (Ray's default, niceness +15, made them yield to every other program on a shared machine)
            os.environ.setdefault("RAY_worker_niceness", "0")
        # Ray's own lines (its start, the workers' and raylet's logs, e.g. the actors ended at shutdown
        # reported as "A worker died ... SYSTEM_ERROR") stay off the output: failures come back as
        # exceptions, said in one error line
        # Ray's C++ client writes each retry while it joins to file descriptor 2 (20 lines when refused): they
        # go to a file of their own, and the refusal's reason (e.g. InvalidAuthToken) into the one error line
        with tempfile.NamedTemporaryFile(prefix="zoo-ray-join-") as notes:
            try:
                with native_output_to(notes.name) if joining else nullcontext():
                    ray.init(address=args.ray_address, log_to_driver=False, include_dashboard=False,
                             logging_level=logging.ERROR)
            except (ConnectionError, RuntimeError, ValueError) as e:
                refused = refusal(notes.read().decode("utf-8", "replace"))
                # Ray 2.59+ starts `ray start --head` with token authentication, and a driver given an address
                # sends the token only with RAY_AUTH_MODE=token: its refusal reads as no cluster at all
                reason = " ".join(str(e).split())  # one line (Ray's advice on an http:// address takes three)
                raise ZooError(f"cannot join the Ray cluster {address!r} ({reason}{refused}): start one with "
                               "`ray start --head`; if one runs there with token authentication (Ray 2.59+ turns it "
                               "on), set RAY_AUTH_MODE=token (on another machine also RAY_AUTH_TOKEN, the head's "
                               "`ray get-auth-token`); or leave --ray-address out for a local one") from None
    logging.getLogger("ray.data").setLevel(logging.ERROR)
    ray.data.DataContext.get_current().enable_progress_bars = False  # our one summary line says the result
    try:
        with warnings.catch_warnings(), native_output_to(ray_log(ray)):
            warnings.filterwarnings("ignore", module="ray")  # Ray Data's advice on its scheduling (fewer inputs than actors)
            return run_dataset(ray, spec, args, inputs, weights, options, path)
    finally:
        if started:  # the actors end here, before the process exits, not killed at its exit
            ray.shutdown()


def refusal(notes: str) -> str:
    """``: REASON`` from the last RPC error Ray's client wrote while it tried to join, or ""."""
    errors = re.findall(r"RPC error: (.+)", notes)
    return f": {errors[-1].strip()}" if errors else ""


def ray_log(ray) -> str:
    """A file in the Ray session's log folder for what Ray's C++ core prints in this process."""
    try:
        return str(Path(ray._private.worker.global_worker.node.get_logs_dir_path()) / f"zoo-run-{os.getpid()}.err")
    except (AttributeError, OSError):  # Ray's private layout moved: its notes go nowhere
        return os.devnull


@contextmanager
def native_output_to(path: str):
    """Ray's C++ core in this process writes its notes (e.g. on actors' constructor arguments) to file
    descriptor 2: they go to ``path`` while Python's sys.stderr (our lines) keeps the terminal."""
    try:
        ours = sys.stderr.fileno() == 2
    except (AttributeError, OSError, ValueError):  # a captured or replaced stderr: fd 2 is not ours
        ours = False
    sys.stderr.flush()
    saved = os.dup(2)
    python_stderr = sys.stderr
    if ours:
        sys.stderr = open(os.dup(saved), "w", buffering=1, encoding=python_stderr.encoding, errors="backslashreplace")
    try:
        with open(path, "ab") as log:
            os.dup2(log.fileno(), 2)
        yield
    finally:
        if ours:
            sys.stderr.close()
            sys.stderr = python_stderr
        os.dup2(saved, 2)
        os.close(saved)


def run_dataset(ray, spec, args, inputs, weights, options: dict, path: Path) -> int:
    """``inputs``: a URI, or image_paths' paths (opened again as inputs, a list's missing entry ended the run)."""
    batch_size = max(zoo_ray.BATCH_SIZE, args.batch)
    if not isinstance(inputs, str):
        inputs = zoo_ray.paths_dataset(inputs, batch_size)
    dataset = zoo_ray.run(args.model, inputs, weights=weights, actors=args.actors, batch_size=batch_size,
                          actor_cpus=args.actor_cpus, num_gpus=args.actor_gpus, **options)
    counts = {"rows": 0, "failed": 0}
    schema = schema_for(spec.task)
    write = write_parquet if args.format == "parquet" else functools.partial(write_jsonl, where=path)
    try:
        write_atomic(path, lambda file: write(file, tables(dataset, schema, counts), schema), replace=args.overwrite)
    except ray.exceptions.RayError as e:  # e.g. an actor that could not build its model
        raise ZooError(f"the Ray run failed: {root_cause(e)}") from None
    failed = f", {counts['failed']} failed" if counts["failed"] else ""
    print(f"{counts['rows']} images{failed}; results in {path}", file=sys.stderr)
    return 1 if counts["failed"] else 0


def fetch_weights(spec, weights: str | None) -> None:
    """Fail here, in one line, where every actor would fail: the Hub file is fetched now (into the
    cache the actors of this machine read), a weights path must be a file."""
    from zoo.weights import hub
    from zoo.weights.synthetic import parse_synthetic

    if weights is None:
        hub.download(spec.hub_repo, spec.hub_file, licence=spec.licence)
    elif parse_synthetic(str(weights)) is None and not Path(weights).is_file():
        raise UsageError(f"--weights {weights} is not a file: pass a checkpoint path, or synthetic[:SEED]")


def root_cause(error: Exception) -> str:
    """The last line of a Ray error: the exception raised in the actor, without Ray's traceback."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__


def tables(dataset, schema, counts: dict):
    """The dataset's result batches as Arrow tables of ``schema``, as they come; each failed row warned."""
    for table in dataset.iter_batches(batch_format="pyarrow", batch_size=None):
        table = table.select(schema.names).cast(schema)
        counts["rows"] += table.num_rows
        for path, error in zip(table["path"].to_pylist(), table["error"].to_pylist()):
            if error:
                counts["failed"] += 1
                print(f"warning: skipped {path}: {error}", file=sys.stderr)
        yield table


def write_parquet(file, tables, schema) -> None:
    import pyarrow.parquet as pq

    with pq.ParquetWriter(file, schema) as writer:
        for table in tables:
            writer.write_table(table)


def write_jsonl(file, tables, schema, where: Path) -> None:
    """One record a line: the path and its results, or the path and its error; ``where``: the file's path."""
    results = [name for name in schema.names if name not in ("path", "error")]
    for table in tables:
        for row in table.to_pylist():
            keep = ("path", "error") if row["error"] else ("path", *results)
            file.write((json_text({k: row[k] for k in keep}, where) + "\n").encode("utf-8"))
        file.flush()  # a batch at a time: the temporary file shows the progress
