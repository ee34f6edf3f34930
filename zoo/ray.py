"""Ray Data: every task as a callable class for ``Dataset.map_batches`` (``pip install "mlx-zoo[ray]"``).

Ray is the engine: it spreads the batches over actors on one machine or a cluster; this module
only turns a batch of rows into a batch of results::

    import ray, zoo.ray

    ds = ray.data.read_images("photos/", mode="RGB", include_paths=True, num_cpus=zoo.ray.READ_CPUS)
    out = ds.map_batches(zoo.ray.Classifier, fn_constructor_kwargs={"model": "resnet50"},
                         batch_size=zoo.ray.BATCH_SIZE, num_cpus=zoo.ray.ACTOR_CPUS,
                         compute=ray.data.ActorPoolStrategy(size=2))

or, with the defaults below picked for you, ``zoo.ray.run("resnet50", "photos/")``.

Rows in: ``image`` as ``read_images`` gives it (an (N, H, W, C) array, or an object column of
(H, W, C) arrays when sizes differ; grey and RGBA arrays become RGB as in ``zoo.images``), or,
without ``image``, a ``path`` the actor decodes itself (EXIF orientation and every Pillow mode
handled exactly as the in-process CLI). Rows out: plain columns, ``path`` kept when present, and
``error`` ("" when the row worked; else one line naming the problem, the other columns empty).

=====================  =======================  ===============================================================
class                  columns in               columns out
=====================  =======================  ===============================================================
``Classifier``         image or path            label (int), name, prob (top-1)
``Detector``           image or path            boxes ([[x1, y1, x2, y2], ...]), conf, cls, names
``InstanceSegmenter``  image or path            Detector's and masks (COCO RLE {size, counts} per box)
``PoseEstimator``      image or path            Detector's and keypoints ([[x, y, visibility], ...] per box)
``Segmenter``          image or path, boxes     masks (COCO RLE {size, counts} per box), scores
``Inpainter``          image or path, mask      image (inpainted, uint8 RGB)
=====================  =======================  ===============================================================

Each class takes ``batch`` (images per forward pass, default 1): Ray's ``batch_size`` is how many
rows an actor gets at a time, ``batch`` how many of them go through the model together. With 1,
every row is bit-identical to a one-at-a-time ``model.predict`` (on CPU a batched pass was no
faster); more is faster on a GPU, and its results differ from one-at-a-time in float rounding.

Each actor builds its model once from strings (a loaded model does not pickle): ``model`` is a
registry name, ``weights`` a path, None (the Hub file, downloaded once into the shared cache) or
``synthetic[:SEED]``. OpenBLAS threads (MLX's CPU matmul and convolution, and zoo's C kernels)
are set in the constructor from the CPUs Ray assigned the actor (``zoo.blas.set_threads``,
OpenBLAS's runtime call: nothing has to be set before import); an ``OPENBLAS_NUM_THREADS`` the
user put in the actor's ``runtime_env`` is kept. The model runs on the actor's device (the GPU
where MLX has one: give actors ``num_gpus``). Ray starts its workers fresh (never a fork of a
process that ran MLX, which would hang).
"""
from __future__ import annotations

import inspect
import math
import os
import socket
from abc import ABC, abstractmethod
from pathlib import Path

import numpy as np

from . import blas
from .errors import UsageError, ZooError
from .extras import require

# Defaults that cannot deadlock: a read task (read_images) needs a CPU of its own while the
# actors hold theirs (with 1-CPU actors on every CPU, Ray's reads wait forever, "backpressured").
# An actor asks for ACTOR_CPUS and a read task for READ_CPUS: two actors and two reads fit 2 CPUs.
ACTOR_CPUS = 0.75
READ_CPUS = 0.25
BATCH_SIZE = 8
# a Ray head answers at once: a connect or an HTTP/2 greeting that takes longer is no Ray head
# (given the address, Ray's client retries a blocking connect for minutes, deaf to SIGTERM)
ADDRESS_TIMEOUT_S = 3.0
# the HTTP/2 client preface and an empty SETTINGS frame: Ray's GCS and Ray Client are gRPC servers,
# which answer with a SETTINGS frame of their own (type 4, the 4th byte of its 9-byte header)
HTTP2_GREETING = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def import_ray():
    require("ray.data", "Ray Data")
    return require("ray", "Ray Data")


def check_address(address: str | None, name: str) -> None:
    """A Ray head answers at ``address`` (host:port, or Ray Client's ray://host:port), else a ZooError in one line;
    ``name`` says where the address came from (--ray-address, RAY_ADDRESS). None, "auto" and "local" are Ray's
    to resolve (auto, without a head on this machine, fails at once), as is a malformed address (Ray says why)."""
    target = (address or "").strip()
    client = target.startswith("ray://")
    host, _, port = target.removeprefix("ray://").rstrip("/").rpartition(":")
    if client and not port.isdigit():  # ray://host: Ray Client's default port
        host, port = target.removeprefix("ray://").rstrip("/"), "10001"
    if not host or not port.isdigit() or "://" in host:  # None, auto, local, no port, http://: Ray's to refuse
        return
    host = host.strip("[]")  # [::1]:6379
    problem = head_problem(host, int(port))
    if problem:
        raise ZooError(f"{name} {address}: {problem}: start the head there with `ray start --head` (its port: 6379, "
                       "or Ray Client's 10001 in ray://HOST:10001), check the host and the port (HEAD_IP:6379), "
                       "or pass --ray-address auto on the head itself")


def head_problem(host: str, port: int) -> str | None:
    """Why no Ray head answers at host:port, or None when a gRPC server does."""
    try:
        connection = socket.create_connection((host, port), timeout=ADDRESS_TIMEOUT_S)
    except socket.gaierror as e:
        return f"the host {host} does not resolve ({e.strerror})"
    except ConnectionRefusedError:
        return f"nothing listens on port {port} of {host} (connection refused)"
    except TimeoutError:
        return f"{host}:{port} did not answer within {ADDRESS_TIMEOUT_S:g} s"
    except OSError as e:
        return f"{host}:{port} cannot be reached ({e.strerror or e})"
    with connection:
        if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):  # TLS first: no plain greeting to check
            return None
        reply = b""
        try:
            connection.sendall(HTTP2_GREETING)
            while len(reply) < 9:
                received = connection.recv(9 - len(reply))
                if not received:
                    break
                reply += received
        except OSError:  # a timeout, a reset: not a gRPC server
            pass
    if len(reply) < 9 or reply[3] != 4:
        return f"what listens on {host}:{port} is not a Ray head (it did not answer as gRPC)"
    return None


def assigned_cpus() -> float | None:
    """The CPUs Ray assigned this worker; None outside a Ray worker."""
    try:
        import ray
    except ImportError:
        return None
    if not ray.is_initialized():
        return None
    return ray.get_runtime_context().get_assigned_resources().get("CPU")


class _Task(ABC):
    """One model per actor. Only strings cross the wire: the model is built here, in the actor."""

    task: str

    def __init__(self, model: str, weights: str | None = None, dtype: str = "float32", device: str | None = None,
                 batch: int = 1, **load_options):
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise UsageError(f"batch {batch!r} must be a positive integer: use e.g. 8")
        self.batch = batch
        cpus = assigned_cpus()
        if cpus is not None and "OPENBLAS_NUM_THREADS" not in os.environ:
            blas.set_threads(max(1, round(cpus)))
        from . import registry

        spec = registry.spec_for(model, weights)
        if spec.task != self.task:
            raise UsageError(f"{model} is a {spec.task} model: use zoo.ray.{CLASSES[spec.task].__name__}")
        self.model = registry.load(model, weights=weights, dtype=dtype, device=device, **load_options)

    def __call__(self, batch: dict) -> dict:
        batch = numpy_batch(batch)
        rows = len(next(iter(batch.values())))
        images, errors = [], []
        for i in range(rows):
            try:
                images.append(row_image(batch, i))
                errors.append("")
            except ZooError as e:
                images.append(None)
                errors.append(" ".join(str(e).split()))
        ok = [i for i in range(rows) if not errors[i]]
        out = self.empty(rows)
        for name, column in self.predict([images[i] for i in ok], batch, ok).items():
            for i, value in zip(ok, column):
                out[name][i] = value
        out = {name: as_column(column) for name, column in out.items()}
        if "path" in batch:
            out["path"] = np.asarray(batch["path"])
        out["error"] = np.array(errors, dtype=object)
        return out

    @abstractmethod
    def predict(self, images: list[np.ndarray], batch: dict, rows: list[int]) -> dict[str, list]:
        """Results of the readable rows (``rows``: their positions in ``batch``), one list per column."""

    @abstractmethod
    def empty(self, rows: int) -> dict[str, list]:
        """Each output column as it stands for a row that failed."""


def numpy_batch(batch) -> dict:
    """A batch as ``{column: numpy array}``, whichever ``batch_format`` the user gave map_batches: numpy's is
    that already; pandas' DataFrame and pyarrow's Table become it (the columns out are numpy either way,
    which Ray takes back whatever the format in)."""
    if isinstance(batch, dict):
        return batch
    if hasattr(batch, "column_names"):  # pyarrow.Table
        return {name: column_values(batch.column(name)) for name in batch.column_names}
    if hasattr(batch, "iloc"):  # pandas.DataFrame
        return {name: column_values(batch[name]) for name in batch.columns}
    raise UsageError(f"a batch of {type(batch).__name__}: pass batch_format='numpy' (or 'pandas', 'pyarrow') "
                     "to map_batches")


def column_values(column) -> np.ndarray:
    """One column of a pandas or pyarrow batch as numpy (Ray's image tensors: an array, or an object array of
    arrays when their sizes differ)."""
    if hasattr(column, "combine_chunks"):  # pyarrow; Ray's tensor extension arrays convert themselves
        return column.combine_chunks().to_numpy(zero_copy_only=False)
    return column.to_numpy()


def row_image(batch: dict, i: int) -> np.ndarray:
    """Row ``i``'s pixels as (H, W, 3) uint8 RGB: the ``image`` column, else its ``path`` decoded here."""
    from .images import load_image
    from .sources import load_image_file

    if "image" in batch:
        return load_image(np.asarray(batch["image"][i]), what=f"row {i}'s image")
    if "path" in batch:
        return load_image_file(Path(str(batch["path"][i])))
    raise ZooError(f"the batch has no 'image' or 'path' column (it has {', '.join(batch)}): read the data "
                   "with ray.data.read_images or give a column of paths")


def as_column(values: list) -> np.ndarray:
    """A list of a batch's values as one numpy column Ray turns into Arrow: lists, dicts and arrays of
    different shapes (images of different sizes) one object each; arrays of one shape stacked."""
    if values and all(isinstance(v, np.ndarray) for v in values) and len({v.shape for v in values}) == 1:
        return np.stack(values)
    if any(isinstance(v, (list, dict, np.ndarray)) for v in values):
        column = np.empty(len(values), dtype=object)
        for k, value in enumerate(values):  # one by one: numpy would make equal-length lists a 2-D block
            column[k] = value
        return column
    return np.asarray(values)


def chunks(items: list, size: int) -> list[list]:
    return [items[k:k + size] for k in range(0, len(items), size)]


class Classifier(_Task):
    """ImageNet top-1 per row: ``label`` (class index; -1 for a row that failed), ``name``, ``prob``."""

    task = "classify"

    def predict(self, images, batch, rows):
        top = [t for chunk in chunks(images, self.batch) for t in self.model.predict(chunk, top_k=1)]
        return {"label": [t[0][0] for t in top], "name": [t[0][1] for t in top], "prob": [t[0][2] for t in top]}

    def empty(self, rows):
        return {"label": [-1] * rows, "name": [""] * rows, "prob": [math.nan] * rows}


class Detector(_Task):
    """YOLO boxes per row: ``boxes`` [[x1, y1, x2, y2], ...] in the image's pixels, ``conf``, ``cls``,
    ``names``. Options as ``model.predict`` (conf, iou, classes, agnostic_nms, max_det, imgsz)."""

    task = "detect"
    COLUMNS = ("boxes", "conf", "cls", "names")

    def __init__(self, model: str, weights: str | None = None, dtype: str = "float32", device: str | None = None,
                 batch: int = 1, conf: float = 0.25, iou: float = 0.7, classes=None, agnostic_nms: bool = False,
                 max_det: int = 300, imgsz=None):
        super().__init__(model, weights, dtype, device, batch)
        from .models.yolov8.predict import prediction_options

        self.options = prediction_options(self.model, conf, iou, classes, agnostic_nms, max_det, imgsz)

    def predict(self, images, batch, rows):
        from .models.yolov8.predict import predict_batch

        # one forward pass per image size: a batch of one size is letterboxed as each image alone
        # would be (mixed sizes go to imgsz x imgsz), so every row gets its one-at-a-time result
        results = [None] * len(images)
        by_shape: dict[tuple, list[int]] = {}
        for k, image in enumerate(images):
            by_shape.setdefault(image.shape, []).append(k)
        for group in (chunk for same in by_shape.values() for chunk in chunks(same, self.batch)):
            for k, r in zip(group, predict_batch(self.model, [images[k] for k in group], [None] * len(group),
                                                 **self.options)):
                results[k] = r
        return self.columns(results)

    def columns(self, results) -> dict[str, list]:
        return {"boxes": [r.boxes.xyxy.tolist() for r in results],
                "conf": [r.boxes.conf.tolist() for r in results],
                "cls": [r.boxes.cls.astype(int).tolist() for r in results],
                "names": [[r.names[int(c)] for c in r.boxes.cls] for r in results]}

    def empty(self, rows):
        return {name: [[] for _ in range(rows)] for name in self.COLUMNS}


class InstanceSegmenter(Detector):
    """A YOLO segmentation model's rows: Detector's columns and ``masks``, one per box, each at the image's
    size as COCO's compressed RLE ``{"size": [H, W], "counts": str}`` (pycocotools' ``mask.decode``
    reads it; as the Segmenter's masks and ultralytics' save_json). ``retina_masks`` as ``model.predict``:
    False, the letterboxed input's masks scaled to the image; True, masks computed at the image's size."""

    task = "instance-segment"
    COLUMNS = (*Detector.COLUMNS, "masks")

    def __init__(self, model: str, weights: str | None = None, dtype: str = "float32", device: str | None = None,
                 batch: int = 1, conf: float = 0.25, iou: float = 0.7, classes=None, agnostic_nms: bool = False,
                 max_det: int = 300, imgsz=None, retina_masks: bool = False):
        super().__init__(model, weights, dtype, device, batch, conf, iou, classes, agnostic_nms, max_det, imgsz)
        self.options["retina_masks"] = bool(retina_masks)

    def columns(self, results):
        # an image without detections has masks None (as ultralytics' Results): no masks, as no boxes
        return {**super().columns(results), "masks": [[] if r.masks is None else r.masks.coco_rles() for r in results]}


class PoseEstimator(Detector):
    """A YOLO pose model's rows: Detector's columns and ``keypoints``, per box its K points [x, y, visibility]
    in the image's pixels ([x, y] for a model without visibility)."""

    task = "pose"
    COLUMNS = (*Detector.COLUMNS, "keypoints")

    def columns(self, results):
        return {**super().columns(results), "keypoints": [r.keypoints.data.tolist() for r in results]}


class Segmenter(_Task):
    """MobileSAM masks for each row's ``boxes`` ((K, 4) or one (4,) box, x1, y1, x2, y2 pixels): ``masks``
    as COCO RLE (``{"size": [H, W], "counts": str}``, pycocotools) and ``scores``, one per box."""

    task = "segment"

    def __init__(self, model: str = "mobilesam", weights: str | None = None, dtype: str = "float32",
                 device: str | None = None):
        super().__init__(model, weights, dtype, device)
        self.predictor = self.model.predictor()

    def predict(self, images, batch, rows):
        from .models.mobilesam.amg import coco_encode_rle, mask_to_rle

        if "boxes" not in batch:
            raise ZooError("Segmenter needs a 'boxes' column: per row (K, 4) boxes x1, y1, x2, y2 in pixels")
        masks, scores = [], []
        for image, i in zip(images, rows):
            boxes = as_boxes(batch["boxes"][i])
            self.predictor.set_image(image)
            found, score, _ = self.predictor.predict(boxes=boxes, multimask_output=False)
            masks.append([coco_encode_rle(rle) for rle in mask_to_rle(found[:, 0])])
            scores.append(score[:, 0].tolist())
        return {"masks": masks, "scores": scores}

    def empty(self, rows):
        return {"masks": [[] for _ in range(rows)], "scores": [[] for _ in range(rows)]}


def as_boxes(value) -> np.ndarray:
    """A row's boxes as (K, 4) float32, from an array or from the nested object arrays Arrow lists become."""
    boxes = np.asarray(value)
    if boxes.dtype == object:
        boxes = np.stack([np.asarray(box, np.float32) for box in boxes])
    return boxes.astype(np.float32).reshape(-1, 4)


class Inpainter(_Task):
    """LaMa: each row's ``image`` with the hole its ``mask`` marks filled (``mask``: an (H, W) array,
    nonzero = hole, or a path). Options as ``model.inpaint`` (hd_strategy, resize_limit, ...)."""

    task = "inpaint"

    def __init__(self, model: str = "lama", weights: str | None = None, dtype: str = "float32",
                 device: str | None = None, **inpaint_options):
        super().__init__(model, weights, dtype, device)
        self.inpaint_options = inpaint_options

    def predict(self, images, batch, rows):
        if "mask" not in batch:
            raise ZooError("Inpainter needs a 'mask' column: per row an (H, W) array (nonzero = hole) or a path")
        masks = [batch["mask"][i] for i in rows]
        return {"image": [self.model.inpaint(image, mask if isinstance(mask, str) else np.asarray(mask),
                                             **self.inpaint_options) for image, mask in zip(images, masks)]}

    def empty(self, rows):
        return {"image": [np.zeros((0, 0, 3), np.uint8) for _ in range(rows)]}


CLASSES = {"classify": Classifier, "detect": Detector, "instance-segment": InstanceSegmenter, "pose": PoseEstimator,
           "segment": Segmenter, "inpaint": Inpainter}


def image_paths(inputs, recursive: bool = False) -> list[str]:
    """The image files of CLI-style inputs (files, folders, globs, .txt/.csv lists), as strings."""
    from .sources import Chain, Files, open_source

    def paths(source) -> list[str]:
        if isinstance(source, Chain):
            return [p for part in source.sources for p in paths(part)]
        if not isinstance(source, Files):
            raise UsageError(f"Ray runs over image files; {source.kind} inputs are not supported: "
                             "pass image files, folders, globs or lists")
        if source.videos:
            raise UsageError(f"Ray runs over image files, not videos ({next(iter(source.videos))}): "
                             "run videos without --ray")
        return [str(p) for p in source.paths]

    return paths(open_source(inputs, recursive=recursive))


def paths_dataset(paths: list[str], batch_size: int = BATCH_SIZE):
    """A Dataset of ``path`` rows, each decoded by the actor that runs it (image_paths' paths as they are: a list's
    entry that is not there is its row's error, as in a run without Ray)."""
    ray = import_ray()
    # absolute: an actor resolves a relative path in its own working folder, the one its cluster started in
    paths = [os.path.abspath(p) for p in paths]
    # a block per batch: the actors share the work a batch at a time
    return ray.data.from_items([{"path": p} for p in paths],
                               override_num_blocks=max(1, math.ceil(len(paths) / batch_size)))


def is_uri(inputs) -> bool:
    """A URI Ray's readers open (s3://bucket/photos/, gs://..., file:///...), as opposed to local paths."""
    return isinstance(inputs, str) and "://" in inputs and not Path(inputs).exists()


def check_uri(uri: str) -> None:
    """Something to read at ``uri`` as Ray's readers open it (pyarrow's file systems, which take the endpoint and
    credentials from the environment: AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID ...), else a ZooError in one line, said
    before any cluster work; a scheme pyarrow does not know is left to Ray (its readers fall back to fsspec)."""
    import pyarrow.fs

    try:
        filesystem, path = pyarrow.fs.FileSystem.from_uri(uri)  # S3 without a region asks the endpoint for it
        found = filesystem.get_file_info(path).type != pyarrow.fs.FileType.NotFound
    except (ValueError, ImportError):  # ArrowInvalid: a scheme pyarrow does not open
        return
    except OSError as e:  # a malformed or unreachable endpoint, refused credentials, a bucket of another region
        reason = " ".join(str(e).split())
        raise ZooError(f"cannot read {uri} ({reason}): check the storage's endpoint (AWS_ENDPOINT_URL for S3), the "
                       "credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) and the bucket's name") from None
    if not found:
        raise ZooError(f"{uri}: nothing there (no such bucket, folder or file): check the URI, and for S3 that "
                       "AWS_ENDPOINT_URL names the storage that holds it")


def check_task_options(spec, options: dict) -> None:
    """``options`` of ``run``, checked where it is called: an option the task's class does not take fails here in one
    line, not in every actor once the cluster has started (e.g. ``address``, ray.init's). Options a class takes as a
    whole (Inpainter's, LaMa's inpaint options) are checked where they are used."""
    from . import registry

    parameters = inspect.signature(CLASSES[spec.task]).parameters
    rest = {name: value for name, value in options.items() if name not in parameters}
    hint = "; pick the cluster with ray.init(address=...) before zoo.ray.run" if "address" in rest else ""
    if "load_options" in parameters:  # the rest go to the model's builder: its own check
        try:
            registry.check_options(spec, rest)
        except UsageError as e:
            own = ", ".join(name for name in parameters if name not in ("model", "weights", "load_options"))
            raise UsageError(f"zoo.ray.run: {e} (and {own}){hint}") from None
    elif rest and not any(p.kind == p.VAR_KEYWORD for p in parameters.values()):
        known = [name for name in parameters if name not in ("model", "weights")]
        raise UsageError(f"zoo.ray.run: {CLASSES[spec.task].__name__} ({spec.name}) takes no option "
                         f"{', '.join(sorted(rest))}: its options are {', '.join(known)}{hint}")


def run(model: str, inputs, weights: str | None = None, actors: int | None = None, batch_size: int = BATCH_SIZE,
        actor_cpus: float = ACTOR_CPUS, num_gpus: float = 0, recursive: bool = False, **options):
    """``model`` over ``inputs`` with defaults that keep every CPU busy and cannot deadlock; a lazy Dataset.

    ``inputs``: a ray.data.Dataset (with the columns the task's class reads); a URI
    (``s3://bucket/photos/``), read by ``ray.data.read_images`` on READ_CPUS per read task; or
    files, folders, globs and lists of images: those become a Dataset of paths, each decoded in
    the actor that runs it (so no read task competes with the actors for CPUs; the files must be
    visible to every node, e.g. on a shared file system). ``actors``: default, one per
    CPU of the cluster (one per ``actor_cpus`` when that is more than 1). ``options``: the task class's (e.g. conf for a
    Detector). Call ``ray.init(...)`` first to pick a cluster; without it Ray starts a local one.
    """
    ray = import_ray()
    from . import registry

    spec = registry.spec_for(model, weights)  # a family's name given a file: the file's task (yolov8 + seg best.pt)
    check_task_options(spec, options)
    if isinstance(inputs, ray.data.Dataset):
        dataset = inputs
    elif is_uri(inputs):  # s3://, gs://, ...: Ray's readers; a read task per file, on READ_CPUS
        check_uri(inputs)
        dataset = ray.data.read_images(inputs, mode="RGB", include_paths=True, num_cpus=READ_CPUS)
    else:
        dataset = paths_dataset(image_paths(inputs, recursive), batch_size)
    if weights is not None and Path(weights).exists():
        weights = os.path.abspath(weights)  # read in the actors too
    if actors is None:
        actors = max(1, int(ray.cluster_resources().get("CPU", 1) // max(1.0, actor_cpus)))
    return dataset.map_batches(CLASSES[spec.task], fn_constructor_kwargs={"model": model, "weights": weights, **options},
                               batch_size=batch_size, batch_format="numpy", num_cpus=actor_cpus, num_gpus=num_gpus,
                               compute=ray.data.ActorPoolStrategy(size=actors))
