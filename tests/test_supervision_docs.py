"""supervision's documentation run on mlx-zoo, example by example: the Ultralytics tab of each how-to page that runs a
model (detect_and_annotate, detect_small_objects, track_objects, save_detections, filter_detections,
benchmark_a_model) and the annotators page's Trace and HeatMap tabs, as supervision's repository holds them at 0.27.0
(the newest snapshot here; the 0.31.2 wheel carries no docs), and the examples of
supervision 0.31.2's own API pages (its docstrings: KeyPoints.from_ultralytics, the keypoint annotators, the
Detections item setter, InferenceSlicer, PolygonZone, LineZone, VideoInfo, VideoSink, Detections.from_sam), with
``from zoo import YOLO`` for ``from ultralytics import YOLO`` and segment-anything's names from
``zoo.models.mobilesam``. Adapted only where this machine needs it: synthetic weights (ZOO_WEIGHTS, a MobileSAM
checkpoint written here), small local files for the pages' placeholders, n models for the x and m ones (the same code
at a fraction of the work on 2 cores), and a stand-in for ``sv.ByteTrack`` (``IouTracker``).

Each YOLO example runs twice: on our Results, then on ultralytics-shaped results built from the same numbers (plain
numpy arrays, as ultralytics' ``Results.numpy()`` holds them: ``ultralytics_shaped``). What supervision makes of the
two (detections, key points, annotated images, the frames of the videos written, CSV and JSON files, zone counts,
metrics) must be equal; each test also checks what its page promises.
"""
from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from types import SimpleNamespace

import cv2
import numpy as np
import pytest
import supervision as sv
from PIL import Image

import sam_crafted
import zoo
from conftest import MANIFESTS, write_video
from zoo import registry
from zoo.errors import ZooError
from zoo.weights.synthetic import read_manifest, synthetic_state_dict

IMPORT = ("from ultralytics import YOLO", "from zoo import YOLO")
SMALLER_MODELS = {"yolov8x": "yolov8n", "yolov8m-pose": "yolov8n-pose", "yolo11m": "yolo11n",
                  "yolo11s-seg": "yolo11n-seg"}
FILES = {"SOURCE_IMAGE_PATH": "image.jpg", "SOURCE_VIDEO_PATH": "people-walking.mp4",
         "TARGET_VIDEO_PATH": "annotated.mp4", "TARGET_CSV_PATH": "detections.csv",
         "TARGET_JSON_PATH": "detections.json"}
PLACEHOLDER = re.compile(r'"?<(\w+)>"?')  # <SOURCE_IMAGE_PATH>, bare in the how-to pages, quoted in the docstrings
IMAGE_HW = (256, 1024)  # wide enough for InferenceSlicer's default 640 px tiles to be two
FRAMES = 2


def ultralytics_shaped(r) -> SimpleNamespace:
    """The numbers of our Results ``r`` as ultralytics' ``Results.numpy()`` holds them: plain numpy arrays, no zoo
    type (boxes xyxy conf cls id, masks.data, keypoints xy conf, names, orig_shape)."""
    def plain(value):
        return None if value is None else np.array(value)

    boxes = SimpleNamespace(xyxy=plain(r.boxes.xyxy), conf=plain(r.boxes.conf), cls=plain(r.boxes.cls),
                            id=plain(r.boxes.id))
    masks = None if r.masks is None else SimpleNamespace(data=plain(r.masks.data))
    keypoints = None if r.keypoints is None else SimpleNamespace(xy=plain(r.keypoints.xy),
                                                                 conf=plain(r.keypoints.conf))
    return SimpleNamespace(boxes=boxes, masks=masks, keypoints=keypoints, obb=None, names=dict(r.names),
                           orig_shape=tuple(r.orig_shape))


class IouTracker:
    """``sv.ByteTrack``'s interface, as the pages call it. supervision 0.30 removed the class for the trackers
    package's ``ByteTrackTracker`` (``tracker.update(detections)``), which requires opencv-python, a second copy of
    the headless OpenCV installed here. A detection overlapping one of the previous frame's by IoU >= 0.5 keeps its
    id, another gets a new one; ``assigned`` lists each frame's ids."""

    assigned: list[list[int]]

    def __init__(self):
        self.previous, self.next_id = sv.Detections.empty(), 1
        self.previous.tracker_id = np.empty(0, int)

    def update_with_detections(self, detections: sv.Detections) -> sv.Detections:
        ids = []
        overlap = sv.box_iou_batch(detections.xyxy, self.previous.xyxy) if len(self.previous) else None
        for i in range(len(detections)):
            best = -1 if overlap is None else int(np.argmax(overlap[i]))
            if best >= 0 and overlap[i, best] >= 0.5 and self.previous.tracker_id[best] not in ids:
                ids.append(int(self.previous.tracker_id[best]))
            else:
                ids.append(self.next_id)
                self.next_id += 1
        detections.tracker_id = np.array(ids, int)
        self.previous = detections
        type(self).assigned.append(ids)
        return detections


def same(ours, reference) -> bool:
    if isinstance(ours, np.ndarray):
        return isinstance(reference, np.ndarray) and ours.shape == reference.shape and np.array_equal(ours, reference)
    if isinstance(ours, list):
        return len(ours) == len(reference) and all(map(same, ours, reference))
    return ours == reference


MODELS: dict = {}  # YOLO(name) -> its model, shared by the tests: each model builds and compiles once


def shared_yolo(model: str, **options):
    """``from zoo import YOLO`` in the examples: zoo.YOLO, once per model name."""
    if model not in MODELS:
        MODELS[model] = registry.YOLO(model, **options)
    return MODELS[model]


class Docs:
    """Runs a page's example in the working folder (``docs`` below) and checks supervision made the same of our
    results and of ultralytics-shaped ones."""

    def __init__(self, monkeypatch):
        self.monkeypatch = monkeypatch
        self.written: list[np.ndarray] = []  # the frames the example wrote into videos
        self.read: list = []  # the Results the example gave supervision's from_ultralytics, in order
        write_frame = sv.VideoSink.write_frame
        monkeypatch.setattr(sv.VideoSink, "write_frame",
                            lambda sink, frame: self.written.append(frame.copy()) or write_frame(sink, frame))
        monkeypatch.setattr(sv, "ByteTrack", IouTracker, raising=False)
        monkeypatch.setattr(zoo, "YOLO", shared_yolo, raising=False)

    def run(self, example: str, outputs: tuple[str, ...] = (), names: dict | None = None) -> dict:
        """Our run's namespace; ``outputs``: the files it writes, compared as bytes; ``names``: given to the
        example (what a page's earlier steps made)."""
        self.read = []
        with self.monkeypatch.context() as patched:
            self.read_with(patched, lambda results: self.read.append(results) or results)
            ours = self.once(example, outputs, names)
        with self.monkeypatch.context() as patched:
            self.read_with(patched, ultralytics_shaped)
            reference = self.once(example, outputs, names)
        assert ours["compared"].keys() == reference["compared"].keys()
        for name, value in ours["compared"].items():
            assert same(value, reference["compared"][name]), name
        return {**ours, "read": self.read}

    @staticmethod
    def read_with(patched, given) -> None:
        """supervision's from_ultralytics of Detections and KeyPoints reads ``given(results)``."""
        for kind in (sv.Detections, sv.KeyPoints):
            patched.setattr(kind, "from_ultralytics", classmethod(
                lambda cls, results, read=kind.from_ultralytics.__func__: read(cls, given(results))))

    def once(self, example: str, outputs: tuple[str, ...], names: dict | None = None) -> dict:
        code = example.replace(*IMPORT)
        for large, small in SMALLER_MODELS.items():
            code = code.replace(f'"{large}', f'"{small}').replace(f"'{large}", f"'{small}")
        code = PLACEHOLDER.sub(lambda m: repr(FILES[m.group(1)]), code)
        assert "from zoo import YOLO" in code or "from ultralytics" not in code
        self.written.clear()
        IouTracker.assigned = []
        namespace = dict(names or {})
        # dont_inherit: the example's own semantics, not this module's `from __future__ import annotations`
        exec(compile(code, "<supervision docs example>", "exec", dont_inherit=True), namespace)  # noqa: S102
        compared = {name: value for name, value in namespace.items()
                    if isinstance(value, (np.ndarray, sv.Detections, sv.KeyPoints, list, int, float))}
        compared.update({"frames written": list(self.written), "tracker ids": IouTracker.assigned})
        compared.update({path: Path(path).read_bytes() for path in outputs})
        return {**namespace, "compared": compared, "written": list(self.written), "tracked": IouTracker.assigned}


@pytest.fixture
def docs(tmp_path, monkeypatch):
    """The files the examples name, small, in the working folder; synthetic YOLO weights."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ZOO_WEIGHTS", "synthetic")
    rng = np.random.default_rng(0)
    cv2.imwrite("image.jpg", rng.integers(0, 256, (*IMAGE_HW, 3), np.uint8))
    Image.open("image.jpg").save("example.png")
    write_video(Path("people-walking.mp4"), FRAMES)
    write_video(Path("skiing.mp4"), FRAMES)
    return Docs(monkeypatch)


def drawn(scene: np.ndarray, image: np.ndarray) -> np.ndarray:
    """(H, W) bool: the pixels an annotator changed."""
    return (scene != image).any(axis=2)


# how_to/detect_and_annotate.md and detect_small_objects.md, Ultralytics tabs
ANNOTATE = {
    "detect_and_annotate: Load Predictions into Supervision": '''
import cv2
import supervision as sv
from ultralytics import YOLO

model = YOLO("yolov8n.pt")
image = cv2.imread(<SOURCE_IMAGE_PATH>)
results = model(image)[0]
detections = sv.Detections.from_ultralytics(results)
''',
    "detect_and_annotate: Annotate Image with Detections": '''
import cv2
import supervision as sv
from ultralytics import YOLO

model = YOLO("yolov8n.pt")
image = cv2.imread(<SOURCE_IMAGE_PATH>)
results = model(image)[0]
detections = sv.Detections.from_ultralytics(results)

box_annotator = sv.BoxAnnotator()
label_annotator = sv.LabelAnnotator()

annotated_image = box_annotator.annotate(
    scene=image, detections=detections)
annotated_image = label_annotator.annotate(
    scene=annotated_image, detections=detections)
''',
    "detect_and_annotate: Display Custom Labels": '''
import cv2
import supervision as sv
from ultralytics import YOLO

model = YOLO("yolov8n.pt")
image = cv2.imread(<SOURCE_IMAGE_PATH>)
results = model(image)[0]
detections = sv.Detections.from_ultralytics(results)

box_annotator = sv.BoxAnnotator()
label_annotator = sv.LabelAnnotator()

labels = [
    f"{class_name} {confidence:.2f}"
    for class_name, confidence
    in zip(detections['class_name'], detections.confidence)
]

annotated_image = box_annotator.annotate(
    scene=image, detections=detections)
annotated_image = label_annotator.annotate(
    scene=annotated_image, detections=detections, labels=labels)
''',
    "detect_and_annotate: Annotate Image with Segmentations": '''
import cv2
import supervision as sv
from ultralytics import YOLO

model = YOLO("yolov8n-seg.pt")
image = cv2.imread(<SOURCE_IMAGE_PATH>)
results = model(image)[0]
detections = sv.Detections.from_ultralytics(results)

mask_annotator = sv.MaskAnnotator()
label_annotator = sv.LabelAnnotator(text_position=sv.Position.CENTER_OF_MASS)

annotated_image = mask_annotator.annotate(
    scene=image, detections=detections)
annotated_image = label_annotator.annotate(
    scene=annotated_image, detections=detections)
''',
    "detect_small_objects: Input Resolution": '''
import cv2
import supervision as sv
from ultralytics import YOLO

model = YOLO("yolov8x.pt")
image = cv2.imread(<SOURCE_IMAGE_PATH>)
results = model(image, imgsz=1280)[0]
detections = sv.Detections.from_ultralytics(results)

box_annotator = sv.BoxAnnotator()
label_annotator = sv.LabelAnnotator()

annotated_image = box_annotator.annotate(
    scene=image, detections=detections)
annotated_image = label_annotator.annotate(
    scene=annotated_image, detections=detections)
''',
    # API page Detections.__setitem__
    "detection/core: Detections['names'] = ...": '''
from supervision import _cv2 as cv2
import supervision as sv
from ultralytics import YOLO

image = cv2.imread("<SOURCE_IMAGE_PATH>")
model = YOLO('yolov8s.pt')

result = model(image)[0]
detections = sv.Detections.from_ultralytics(result)

detections['names'] = [
     model.model.names[class_id]
     for class_id
     in detections.class_id
 ]
''',
}


@pytest.mark.parametrize("heading", ANNOTATE)
def test_detect_and_annotate(docs, heading):
    ns = docs.run(ANNOTATE[heading])
    results = ns.get("results", ns.get("result"))
    detections, image = ns["detections"], cv2.imread("image.jpg")
    assert len(detections) == len(results) > 0 and np.array_equal(detections.xyxy, results.boxes.xyxy)
    assert np.array_equal(detections.confidence, results.boxes.conf)
    assert detections["class_name"].tolist() == [results.names[c] for c in results.boxes.cls.int().tolist()]
    if "labels" in ns:
        assert ns["labels"] == [f"{results.names[int(b.cls)]} {float(b.conf):.2f}" for b in results.boxes]
    if "names" in detections.data:
        assert detections["names"].tolist() == detections["class_name"].tolist()
    if "imgsz=1280" in ANNOTATE[heading]:  # a larger input than the default 640 gives other boxes
        assert not same(ns["model"](image)[0].boxes.xyxy, results.boxes.xyxy)
    if "annotated_image" not in ns:
        return
    changed = drawn(ns["annotated_image"], image)
    if detections.mask is not None:
        assert detections.mask.shape == (len(results), *IMAGE_HW)
        assert changed[detections.mask.any(axis=0)].mean() > 0.9  # the masks coloured in
    else:
        x1, y1, x2, y2 = detections.xyxy[0].astype(int)
        assert changed[y1:y2, x1].all() or changed[y1:y2, x1 + 1].all()  # the first box's left edge


# how_to/detect_small_objects.md, Inference Slicer and Small Object Segmentation; InferenceSlicer's API page
SLICER = {
    "detect_small_objects: Inference Slicer": '''
import cv2
import numpy as np
import supervision as sv
from ultralytics import YOLO

model = YOLO("yolov8x.pt")
image = cv2.imread(<SOURCE_IMAGE_PATH>)

def callback(image_slice: np.ndarray) -> sv.Detections:
    result = model(image_slice)[0]
    return sv.Detections.from_ultralytics(result)

slicer = sv.InferenceSlicer(callback = callback)
detections = slicer(image)

box_annotator = sv.BoxAnnotator()
label_annotator = sv.LabelAnnotator()

annotated_image = box_annotator.annotate(
    scene=image, detections=detections)
annotated_image = label_annotator.annotate(
    scene=annotated_image, detections=detections)
''',
    "detect_small_objects: Small Object Segmentation": '''
import cv2
import numpy as np
import supervision as sv
from ultralytics import YOLO

model = YOLO("yolov8x-seg.pt")
image = cv2.imread(<SOURCE_IMAGE_PATH>)

def callback(image_slice: np.ndarray) -> sv.Detections:
    result = model(image_slice)[0]
    return sv.Detections.from_ultralytics(result)

slicer = sv.InferenceSlicer(callback = callback)
detections = slicer(image)

mask_annotator = sv.MaskAnnotator()
label_annotator = sv.LabelAnnotator()

annotated_image = mask_annotator.annotate(
    scene=image, detections=detections)
annotated_image = label_annotator.annotate(
    scene=annotated_image, detections=detections)
''',
    "detection/tools/inference_slicer: a PIL image": '''
import supervision as sv
from PIL import Image
from ultralytics import YOLO

model = YOLO("yolo11m.pt")

def callback(tile):
    results = model(tile)[0]
    return sv.Detections.from_ultralytics(results)

slicer = sv.InferenceSlicer(callback, slice_wh=640, overlap_wh=100)

image = Image.open("example.png")
detections = slicer(image)
''',
}


@pytest.mark.parametrize("heading", SLICER)
def test_inference_slicer(docs, heading):
    detections = docs.run(SLICER[heading])["detections"]
    # boxes from both 640 px tiles (the second from x 384), in the image's pixels
    assert len(detections) and detections.xyxy[:, 2].max() > 640 and detections.xyxy[:, 0].min() < 384
    assert (detections.xyxy >= 0).all() and (detections.xyxy[:, [2, 3]] <= IMAGE_HW[::-1]).all()
    if "seg" in SLICER[heading]:
        assert detections.mask.shape == (len(detections), *IMAGE_HW)


# how_to/track_objects.md, Ultralytics tabs: sv.process_video with a callback, each frame's model call
TRACK = {
    "Run Inference": '''
import numpy as np
import supervision as sv
from ultralytics import YOLO

model = YOLO("yolov8n.pt")
box_annotator = sv.BoxAnnotator()

def callback(frame: np.ndarray, _: int) -> np.ndarray:
    results = model(frame)[0]
    detections = sv.Detections.from_ultralytics(results)
    return box_annotator.annotate(frame.copy(), detections=detections)

sv.process_video(
    source_path="people-walking.mp4",
    target_path="result.mp4",
    callback=callback
)
''',
    "Tracking": '''
import numpy as np
import supervision as sv
from ultralytics import YOLO

model = YOLO("yolov8n.pt")
tracker = sv.ByteTrack()
box_annotator = sv.BoxAnnotator()

def callback(frame: np.ndarray, _: int) -> np.ndarray:
    results = model(frame)[0]
    detections = sv.Detections.from_ultralytics(results)
    detections = tracker.update_with_detections(detections)
    return box_annotator.annotate(frame.copy(), detections=detections)

sv.process_video(
    source_path="people-walking.mp4",
    target_path="result.mp4",
    callback=callback
)
''',
    "Annotate Video with Tracking IDs": '''
import numpy as np
import supervision as sv
from ultralytics import YOLO

model = YOLO("yolov8n.pt")
tracker = sv.ByteTrack()
box_annotator = sv.BoxAnnotator()
label_annotator = sv.LabelAnnotator()

def callback(frame: np.ndarray, _: int) -> np.ndarray:
    results = model(frame)[0]
    detections = sv.Detections.from_ultralytics(results)
    detections = tracker.update_with_detections(detections)

    labels = [
        f"#{tracker_id} {class_name}"
        for class_name, tracker_id
        in zip(detections.data["class_name"], detections.tracker_id)
    ]

    annotated_frame = box_annotator.annotate(
        frame.copy(), detections=detections)
    return label_annotator.annotate(
        annotated_frame, detections=detections, labels=labels)

sv.process_video(
    source_path="people-walking.mp4",
    target_path="result.mp4",
    callback=callback
)
''',
    "Annotate Video with Traces": '''
import numpy as np
import supervision as sv
from ultralytics import YOLO

model = YOLO("yolov8n.pt")
tracker = sv.ByteTrack()
box_annotator = sv.BoxAnnotator()
label_annotator = sv.LabelAnnotator()
trace_annotator = sv.TraceAnnotator()

def callback(frame: np.ndarray, _: int) -> np.ndarray:
    results = model(frame)[0]
    detections = sv.Detections.from_ultralytics(results)
    detections = tracker.update_with_detections(detections)

    labels = [
        f"#{tracker_id} {class_name}"
        for class_name, tracker_id
        in zip(detections.data["class_name"], detections.tracker_id)
    ]

    annotated_frame = box_annotator.annotate(
        frame.copy(), detections=detections)
    annotated_frame = label_annotator.annotate(
        annotated_frame, detections=detections, labels=labels)
    return trace_annotator.annotate(
        annotated_frame, detections=detections)

sv.process_video(
    source_path="people-walking.mp4",
    target_path="result.mp4",
    callback=callback
)
''',
    "Keypoint Detection": '''
import numpy as np
import supervision as sv
from ultralytics import YOLO

model = YOLO("yolov8m-pose.pt")
edge_annotator = sv.EdgeAnnotator()
vertex_annotator = sv.VertexAnnotator()

def callback(frame: np.ndarray, _: int) -> np.ndarray:
    results = model(frame)[0]
    key_points = sv.KeyPoints.from_ultralytics(results)

    annotated_frame = edge_annotator.annotate(
        frame.copy(), key_points=key_points)
    return vertex_annotator.annotate(
        annotated_frame, key_points=key_points)

sv.process_video(
    source_path="skiing.mp4",
    target_path="result.mp4",
    callback=callback
)
''',
    "Convert to Detections": '''
import numpy as np
import supervision as sv
from ultralytics import YOLO

model = YOLO("yolov8m-pose.pt")
edge_annotator = sv.EdgeAnnotator()
vertex_annotator = sv.VertexAnnotator()
box_annotator = sv.BoxAnnotator()

def callback(frame: np.ndarray, _: int) -> np.ndarray:
    results = model(frame)[0]
    key_points = sv.KeyPoints.from_ultralytics(results)
    detections = key_points.as_detections()

    annotated_frame = edge_annotator.annotate(
        frame.copy(), key_points=key_points)
    annotated_frame = vertex_annotator.annotate(
        annotated_frame, key_points=key_points)
    return box_annotator.annotate(
        annotated_frame, detections=detections)

sv.process_video(
    source_path="skiing.mp4",
    target_path="result.mp4",
    callback=callback
)
''',
    "Keypoint Tracking": '''
import numpy as np
import supervision as sv
from ultralytics import YOLO

model = YOLO("yolov8m-pose.pt")
edge_annotator = sv.EdgeAnnotator()
vertex_annotator = sv.VertexAnnotator()
box_annotator = sv.BoxAnnotator()

tracker = sv.ByteTrack()
trace_annotator = sv.TraceAnnotator()

def callback(frame: np.ndarray, _: int) -> np.ndarray:
    results = model(frame)[0]
    key_points = sv.KeyPoints.from_ultralytics(results)
    detections = key_points.as_detections()
    detections = tracker.update_with_detections(detections)

    annotated_frame = edge_annotator.annotate(
        frame.copy(), key_points=key_points)
    annotated_frame = vertex_annotator.annotate(
        annotated_frame, key_points=key_points)
    annotated_frame = box_annotator.annotate(
        annotated_frame, detections=detections)
    return trace_annotator.annotate(
        annotated_frame, detections=detections)

sv.process_video(
    source_path="skiing.mp4",
    target_path="result.mp4",
    callback=callback
)
''',
    "Bonus: Smoothing": '''
import numpy as np
import supervision as sv
from ultralytics import YOLO

model = YOLO("yolov8m-pose.pt")
edge_annotator = sv.EdgeAnnotator()
vertex_annotator = sv.VertexAnnotator()
box_annotator = sv.BoxAnnotator()

tracker = sv.ByteTrack()
smoother = sv.DetectionsSmoother()
trace_annotator = sv.TraceAnnotator()

def callback(frame: np.ndarray, _: int) -> np.ndarray:
    results = model(frame)[0]
    key_points = sv.KeyPoints.from_ultralytics(results)
    detections = key_points.as_detections()
    detections = tracker.update_with_detections(detections)
    detections = smoother.update_with_detections(detections)

    annotated_frame = edge_annotator.annotate(
        frame.copy(), key_points=key_points)
    annotated_frame = vertex_annotator.annotate(
        annotated_frame, key_points=key_points)
    annotated_frame = box_annotator.annotate(
        annotated_frame, detections=detections)
    return trace_annotator.annotate(
        annotated_frame, detections=detections)

sv.process_video(
    source_path="skiing.mp4",
    target_path="result.mp4",
    callback=callback
)
''',
}


@pytest.mark.parametrize("heading", TRACK)
def test_track_objects(docs, heading):
    ns = docs.run(TRACK[heading])
    source = "skiing.mp4" if "skiing" in TRACK[heading] else "people-walking.mp4"
    assert sv.VideoInfo.from_video_path("result.mp4") == sv.VideoInfo.from_video_path(source)
    frames = list(sv.get_video_frames_generator(source))
    assert len(ns["written"]) == len(frames) == FRAMES
    assert all(drawn(annotated, frame).any() for annotated, frame in zip(ns["written"], frames))
    results = ns["read"]  # each frame's
    assert len(results) == FRAMES and all(len(r) for r in results)
    if "tracker" in ns:  # every detection of every frame got an id; a box that stays keeps its id
        assert [len(ids) for ids in ns["tracked"]] == [len(r) for r in results]
        assert set(ns["tracked"][0]) & set(ns["tracked"][1])


# detection/annotators.md, its two tabs that run a model (Trace, HeatMap): VideoInfo, get_video_frames_generator and
# VideoSink around it; the tabs' '...' paths are the source video and the annotated one
VIDEO_ANNOTATORS = {
    "Trace": '''
import supervision as sv
from ultralytics import YOLO

model = YOLO('yolov8x.pt')

trace_annotator = sv.TraceAnnotator()

video_info = sv.VideoInfo.from_video_path(video_path='...')
frames_generator = sv.get_video_frames_generator(source_path='...')
tracker = sv.ByteTrack()

with sv.VideoSink(target_path='...', video_info=video_info) as sink:
    for frame in frames_generator:
        result = model(frame)[0]
        detections = sv.Detections.from_ultralytics(result)
        detections = tracker.update_with_detections(detections)
        annotated_frame = trace_annotator.annotate(
            scene=frame.copy(),
            detections=detections)
        sink.write_frame(frame=annotated_frame)
''',
    "HeatMap": '''
import supervision as sv
from ultralytics import YOLO

model = YOLO('yolov8x.pt')

heat_map_annotator = sv.HeatMapAnnotator()

video_info = sv.VideoInfo.from_video_path(video_path='...')
frames_generator = sv.get_video_frames_generator(source_path='...')

with sv.VideoSink(target_path='...', video_info=video_info) as sink:
    for frame in frames_generator:
        result = model(frame)[0]
        detections = sv.Detections.from_ultralytics(result)
        annotated_frame = heat_map_annotator.annotate(
            scene=frame.copy(),
            detections=detections)
        sink.write_frame(frame=annotated_frame)
''',
}


@pytest.mark.parametrize("tab", VIDEO_ANNOTATORS)
def test_video_annotators(docs, tab):
    example = VIDEO_ANNOTATORS[tab]
    for argument, path in (("video_path", "people-walking.mp4"), ("source_path", "people-walking.mp4"),
                           ("target_path", "annotated.mp4")):
        example = example.replace(f"{argument}='...'", f"{argument}={path!r}")
    ns = docs.run(example)
    assert ns["video_info"] == sv.VideoInfo(width=96, height=64, fps=10, total_frames=FRAMES)
    assert sv.VideoInfo.from_video_path("annotated.mp4") == ns["video_info"]
    frames = list(sv.get_video_frames_generator("people-walking.mp4"))
    assert len(ns["written"]) == FRAMES and len(ns["read"]) == FRAMES and all(len(r) for r in ns["read"])
    # a trace is drawn from a track's second frame on, the heat from the first
    assert all(drawn(a, f).any() for a, f in zip(ns["written"][tab == "Trace":], frames[tab == "Trace":]))
    if tab == "Trace":
        assert [len(ids) for ids in ns["tracked"]] == [len(r) for r in ns["read"]]


# how_to/save_detections.md, Ultralytics tabs
SAVE = {
    "Run Detection": '''
import supervision as sv
from ultralytics import YOLO

model = YOLO("yolov8n.pt")
frames_generator = sv.get_video_frames_generator(<SOURCE_VIDEO_PATH>)

for frame in frames_generator:

    results = model(frame)[0]
    detections = sv.Detections.from_ultralytics(results)
''',
    "Save Detections as CSV": '''
import supervision as sv
from ultralytics import YOLO

model = YOLO("yolov8n.pt")
frames_generator = sv.get_video_frames_generator(<SOURCE_VIDEO_PATH>)

with sv.CSVSink(<TARGET_CSV_PATH>) as sink:
    for frame in frames_generator:

        results = model(frame)[0]
        detections = sv.Detections.from_ultralytics(results)
        sink.append(detections, {})
''',
    "Custom Fields": '''
import supervision as sv
from ultralytics import YOLO

model = YOLO("yolov8n.pt")
frames_generator = sv.get_video_frames_generator(<SOURCE_VIDEO_PATH>)

with sv.CSVSink(<TARGET_CSV_PATH>) as sink:
    for frame_index, frame in enumerate(frames_generator):

        results = model(frame)[0]
        detections = sv.Detections.from_ultralytics(results)
        sink.append(detections, {"frame_index": frame_index})
''',
    "Save Detections as JSON": '''
import supervision as sv
from ultralytics import YOLO

model = YOLO("yolov8n.pt")
frames_generator = sv.get_video_frames_generator(<SOURCE_VIDEO_PATH>)

with sv.JSONSink(<TARGET_JSON_PATH>) as sink:
    for frame_index, frame in enumerate(frames_generator):

        results = model(frame)[0]
        detections = sv.Detections.from_ultralytics(results)
        sink.append(detections, {"frame_index": frame_index})
''',
}
COLUMNS = ["x_min", "y_min", "x_max", "y_max", "class_id", "confidence", "tracker_id", "class_name"]  # the table


@pytest.mark.parametrize("heading", SAVE)
def test_save_detections(docs, heading):
    written = tuple(path for path in ("detections.csv", "detections.json") if path in SAVE[heading])
    ns = docs.run(SAVE[heading], outputs=written)
    results = ns["read"]  # each frame's
    assert len(results) == FRAMES and len(ns["detections"]) == len(results[-1]) > 0
    if not written:
        return
    frame_of_row = [i for i, r in enumerate(results) for _ in range(len(r))]  # a row per detection of each frame
    boxes = np.concatenate([r.boxes.xyxy for r in results])
    if written == ("detections.csv",):
        with open("detections.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        extra = ["frame_index"] if "frame_index" in SAVE[heading] else []
        assert list(rows[0]) == COLUMNS + extra
    else:
        rows = json.loads(Path("detections.json").read_text())
        assert list(rows[0]) == COLUMNS + ["frame_index"]
    assert len(rows) == len(frame_of_row)
    assert np.allclose([[float(row[k]) for k in COLUMNS[:4]] for row in rows], boxes)
    assert [row["class_name"] for row in rows] == [r.names[int(c)] for r in results for c in r.boxes.cls]
    assert {row["tracker_id"] for row in rows} == {""}
    if "frame_index" in SAVE[heading]:
        assert [int(row["frame_index"]) for row in rows] == frame_of_row


# how_to/filter_detections.md, the "After" tab of each heading: its placeholders (sv.Detections(...), image = ...,
# sv.PolygonZone(...)) filled with our model's detections, the image, and the lower half of the image ("filter out
# all detections located in the lower part of the image")
FILTER_SETUP = '''
import cv2
import numpy as np
import supervision as sv
from ultralytics import YOLO

model = YOLO("yolov8n.pt")
original = sv.Detections.from_ultralytics(model(cv2.imread(<SOURCE_IMAGE_PATH>))[0])
'''
PLACEHOLDERS = {"sv.Detections(...)": "original", "image = ...": "image = cv2.imread(<SOURCE_IMAGE_PATH>)",
                "sv.PolygonZone(...)": "sv.PolygonZone(np.array([[0, 128], [1024, 128], [1024, 256], [0, 256]]))"}
FILTER = {  # heading: (example, what every kept detection satisfies)
    "by specific class": ('''
import supervision as sv

detections = sv.Detections(...)
detections = detections[detections.class_id == 0]
''', lambda d: d.class_id == 0),
    "by set of classes": ('''
import numpy as np
import supervision as sv

selected_classes = [0, 2, 3]
detections = sv.Detections(...)
detections = detections[np.isin(detections.class_id, selected_classes)]
''', lambda d: np.isin(d.class_id, [0, 2, 3])),
    "by confidence": ('''
import supervision as sv

detections = sv.Detections(...)
detections = detections[detections.confidence > 0.5]
''', lambda d: d.confidence > 0.5),
    "by area": ('''
import supervision as sv

detections = sv.Detections(...)
detections = detections[detections.area > 1000]
''', lambda d: (d.xyxy[:, 2] - d.xyxy[:, 0]) * (d.xyxy[:, 3] - d.xyxy[:, 1]) > 1000),
    "by relative area": ('''
import supervision as sv

image = ...
height, width, channels = image.shape
image_area = height * width

detections = sv.Detections(...)
detections = detections[(detections.area / image_area) < 0.8]
''', lambda d: (d.xyxy[:, 2] - d.xyxy[:, 0]) * (d.xyxy[:, 3] - d.xyxy[:, 1]) < 0.8 * 256 * 1024),
    "by box dimensions": ('''
import supervision as sv

detections = sv.Detections(...)
w = detections.xyxy[:, 2] - detections.xyxy[:, 0]
h = detections.xyxy[:, 3] - detections.xyxy[:, 1]
detections = detections[(w > 200) & (h > 200)]
''', lambda d: (d.xyxy[:, 2] - d.xyxy[:, 0] > 200) & (d.xyxy[:, 3] - d.xyxy[:, 1] > 200)),
    "by PolygonZone": ('''
import supervision as sv

zone = sv.PolygonZone(...)
detections = sv.Detections(...)
mask = zone.trigger(detections=detections)
detections = detections[mask]
''', lambda d: d.xyxy[:, 3] >= 128),  # the bottom centre (the zone's anchor) in the lower half
    "by mixed conditions": ('''
import supervision as sv

zone = sv.PolygonZone(...)
detections = sv.Detections(...)
mask = zone.trigger(detections=detections)
detections = detections[(detections.confidence > 0.7) & mask]
''', lambda d: (d.confidence > 0.7) & (d.xyxy[:, 3] >= 128)),
}


@pytest.mark.parametrize("heading", FILTER)
def test_filter_detections(docs, heading):
    example, kept = FILTER[heading]
    for placeholder, value in PLACEHOLDERS.items():
        example = example.replace(placeholder, value)
    ns = docs.run(FILTER_SETUP + example)
    original, detections = ns["original"], ns["detections"]
    assert len(original) and kept(detections).all() and len(detections) == kept(original).sum()
    if "zone" in ns:
        assert ns["zone"].current_count == int(ns["mask"].sum())


# how_to/benchmark_a_model.md, Ultralytics tabs in order (Loading a Model, Remapping classes, Mean Average Precision,
# F1 Score), in one session as the page runs them (numpy and supervision imported first: the page leaves out the
# first and defines remap_classes with the second's names before its block imports it). Its dataset (Roboflow's
# Corgi v2 download, `dataset.location`) is a YOLO-seg test set written here: two frames labelled with the model's own
# predictions (Results.save_txt, as `yolo predict --save-txt` writes them), its class named 'person', the model's
# name of what it finds, so that the page's filter keeps the predictions
BENCHMARK = '''
import numpy as np
import supervision as sv
from ultralytics import YOLO

model = YOLO("yolo11s-seg.pt")

def remap_classes(
    detections: sv.Detections,
    class_ids_from_to: dict[int, int],
    class_names_from_to: dict[str, str]
) -> None:
    new_class_ids = [
        class_ids_from_to.get(class_id, class_id) for class_id in detections.class_id]
    detections.class_id = np.array(new_class_ids)

    new_class_names = [
        class_names_from_to.get(name, name) for name in detections["class_name"]]
    predictions["class_name"] = np.array(new_class_names)

import supervision as sv

test_set = sv.DetectionDataset.from_yolo(
    images_directory_path=f"{dataset.location}/test/images",
    annotations_directory_path=f"{dataset.location}/test/labels",
    data_yaml_path=f"{dataset.location}/data.yaml"
)

image_paths = []
predictions_list = []
targets_list = []

for image_path, image, label in test_set:
    result = model(image)[0]
    predictions = sv.Detections.from_ultralytics(result)

    remap_classes(
        detections=predictions,
        class_ids_from_to={16: 0},
        class_names_from_to={"dog": "Corgi"}
    )
    predictions = predictions[
        np.isin(predictions["class_name"], test_set.classes)
    ]

    image_paths.append(image_path)
    predictions_list.append(predictions)
    targets_list.append(label)

from supervision.metrics import MeanAveragePrecision, MetricTarget

map_metric = MeanAveragePrecision(metric_target=MetricTarget.MASKS)
map_result = map_metric.update(predictions_list, targets_list).compute()

from supervision.metrics import F1Score, MetricTarget

f1_metric = F1Score(metric_target=MetricTarget.MASKS)
f1_result = f1_metric.update(predictions_list, targets_list).compute()
map_50, f1_50 = map_result.map50, f1_result.f1_50
'''


def test_benchmark_a_model(docs):
    images = Path("Corgi-v2-4/test/images")
    images.mkdir(parents=True)
    model = zoo.YOLO("yolo11n-seg.pt")
    for i, frame in enumerate(sv.get_video_frames_generator("people-walking.mp4")):
        cv2.imwrite(str(images / f"frame{i}.png"), frame)
        model(frame)[0].save_txt(f"Corgi-v2-4/test/labels/frame{i}.txt")
    Path("Corgi-v2-4/data.yaml").write_text("names: ['person']\nnc: 1\n")
    ns = docs.run(BENCHMARK, names={"dataset": SimpleNamespace(location="Corgi-v2-4")})
    assert [len(p) for p in ns["predictions_list"]] == [len(r) for r in ns["read"]] and len(ns["read"]) == FRAMES
    # each prediction is its own ground truth (its mask as a polygon, rasterised again): each found at IoU 0.5
    assert [len(t) for t in ns["targets_list"]] == [len(r) for r in ns["read"]]
    assert ns["map_50"] == ns["f1_50"] == 1.0


# detection/tools/polygon_zone and line_zone: the API pages' examples (their detections made by hand there) with
# our model's detections; LineZone counts tracked objects (its page sends to a tracker: sv.ByteTrack here)
ZONES = {
    "PolygonZone, PolygonZoneAnnotator": '''
import numpy as np
import supervision as sv
from supervision import _cv2 as cv2
from ultralytics import YOLO

model = YOLO("yolov8n.pt")
image = cv2.imread("<SOURCE_IMAGE_PATH>")
polygon = np.array([[100, 200], [200, 100], [300, 200], [200, 300]])
polygon_zone = sv.PolygonZone(polygon=polygon)
detections = sv.Detections.from_ultralytics(model(image)[0])
is_detections_in_zone = polygon_zone.trigger(detections)
zone_annotator = sv.PolygonZoneAnnotator(zone=polygon_zone, thickness=2)
annotated_scene = zone_annotator.annotate(scene=image.copy())
''',
    "LineZone, LineZoneAnnotator, VideoInfo, VideoSink, get_video_frames_generator": '''
import supervision as sv
from ultralytics import YOLO

model = YOLO("yolov8n.pt")
tracker = sv.ByteTrack()
start = sv.Point(x=48, y=0)
end = sv.Point(x=48, y=64)
line_zone = sv.LineZone(start=start, end=end)
line_zone_annotator = sv.LineZoneAnnotator()

video_info = sv.VideoInfo.from_video_path("<SOURCE_VIDEO_PATH>")
frames_generator = sv.get_video_frames_generator("<SOURCE_VIDEO_PATH>")

with sv.VideoSink(target_path="<TARGET_VIDEO_PATH>", video_info=video_info) as sink:
    for frame in frames_generator:
        result = model(frame)[0]
        detections = sv.Detections.from_ultralytics(result)
        detections = tracker.update_with_detections(detections)
        crossed_in, crossed_out = line_zone.trigger(detections)
        sink.write_frame(frame=line_zone_annotator.annotate(frame.copy(), line_counter=line_zone))
in_count, out_count = line_zone.in_count, line_zone.out_count
''',
}


@pytest.mark.parametrize("heading", ZONES)
def test_zones(docs, heading):
    ns = docs.run(ZONES[heading])
    detections = ns["detections"]
    assert len(detections)
    if "polygon_zone" in ns:
        # a box is in the zone when its bottom centre is (the default anchor)
        bottom_centres = np.stack([(detections.xyxy[:, 0] + detections.xyxy[:, 2]) / 2, detections.xyxy[:, 3]], 1)
        inside = [cv2.pointPolygonTest(ns["polygon"].astype(np.float32), tuple(map(float, p)), False) >= 0
                  for p in bottom_centres]
        assert ns["is_detections_in_zone"].tolist() == inside and ns["polygon_zone"].current_count == sum(inside)
        assert drawn(ns["annotated_scene"], ns["image"]).any()
    else:
        assert len(ns["crossed_in"]) == len(ns["crossed_out"]) == len(detections)
        assert sv.VideoInfo.from_video_path("annotated.mp4") == ns["video_info"]
        frames = list(sv.get_video_frames_generator("people-walking.mp4"))
        # the line, x = 48 (its counts' black text on a black frame changes nothing)
        assert len(ns["written"]) == FRAMES
        assert all(drawn(a, f)[:, 48].mean() > 0.5 for a, f in zip(ns["written"], frames))


# keypoint/core (KeyPoints.from_ultralytics) and keypoint/annotators: the annotators' placeholders (image = ...,
# sv.KeyPoints(...)) filled with the image and its key points from the first example
KEYPOINTS = '''
from supervision import _cv2 as cv2
import supervision as sv
from ultralytics import YOLO

image = cv2.imread("<SOURCE_IMAGE_PATH>")
model = YOLO('yolo11s-pose.pt')

result = model(image)[0]
key_points = sv.KeyPoints.from_ultralytics(result)
'''
KEYPOINT_ANNOTATORS = {
    "VertexAnnotator": '''
import supervision as sv

image = ...
key_points = sv.KeyPoints(...)

vertex_annotator = sv.VertexAnnotator(
    color=sv.Color.GREEN,
    radius=10
)
annotated_frame = vertex_annotator.annotate(
    scene=image.copy(),
    key_points=key_points
)
''',
    "EdgeAnnotator": '''
import supervision as sv

image = ...
key_points = sv.KeyPoints(...)

edge_annotator = sv.EdgeAnnotator(
    color=sv.Color.GREEN,
    thickness=5
)
annotated_frame = edge_annotator.annotate(
    scene=image.copy(),
    key_points=key_points
)
''',
    "VertexLabelAnnotator": '''
import supervision as sv

image = ...
key_points = sv.KeyPoints(...)

vertex_label_annotator = sv.VertexLabelAnnotator(
    color=sv.Color.GREEN,
    text_color=sv.Color.BLACK,
    border_radius=5
)
annotated_frame = vertex_label_annotator.annotate(
    scene=image.copy(),
    key_points=key_points
)
''',
}


@pytest.mark.parametrize("annotator", KEYPOINT_ANNOTATORS)
def test_keypoints_and_their_annotators(docs, annotator):
    example = KEYPOINT_ANNOTATORS[annotator].replace("image = ...", "").replace("key_points = sv.KeyPoints(...)", "")
    ns = docs.run(KEYPOINTS + example)
    result, key_points = ns["result"], ns["key_points"]
    assert len(key_points) == len(result) > 0 and np.array_equal(key_points.xy, result.keypoints.xy)
    assert np.array_equal(key_points.keypoint_confidence, result.keypoints.conf)
    assert np.array_equal(key_points.detection_confidence, result.boxes.conf)
    assert key_points["class_name"].tolist() == [result.names[c] for c in result.boxes.cls.int().tolist()]
    assert drawn(ns["annotated_frame"], ns["image"]).any()
    if annotator == "VertexAnnotator":  # a green disc of radius 10 on each key point
        x, y = np.rint(key_points.xy.reshape(-1, 2)).astype(int).T
        inside = (x >= 0) & (x < IMAGE_HW[1]) & (y >= 0) & (y < IMAGE_HW[0])
        assert inside.any() and (ns["annotated_frame"][y[inside], x[inside]] == [0, 255, 0]).all()


SAM = '''
import supervision as sv
from segment_anything import (
    sam_model_registry,
    SamAutomaticMaskGenerator
 )

sam_model_reg = sam_model_registry[MODEL_TYPE]
sam = sam_model_reg(checkpoint=CHECKPOINT_PATH).to(device=DEVICE)
mask_generator = SamAutomaticMaskGenerator(sam)
sam_result = mask_generator.generate(IMAGE)
detections = sv.Detections.from_sam(sam_result=sam_result)
'''


def test_detections_from_sam(docs, small_mobilesam):
    """detection/core's Detections.from_sam, as written with segment-anything's names from zoo.models.mobilesam,
    MobileSAM's 'vit_t', a checkpoint written here whose decoder answers each point (tests/sam_crafted.py), and 4
    points a side for the generator's 32 (16 prompts through the decoder instead of 1,024)."""
    from safetensors.numpy import save_file

    save_file(sam_crafted.prompt_responsive(synthetic_state_dict(read_manifest(MANIFESTS / "mobilesam.json"), 0)),
              "mobile_sam.safetensors")
    image = cv2.cvtColor(cv2.imread("image.jpg")[:96, :128], cv2.COLOR_BGR2RGB)
    code = SAM.replace("from segment_anything import", "from zoo.models.mobilesam import").replace(
        "SamAutomaticMaskGenerator(sam)", "SamAutomaticMaskGenerator(sam, points_per_side=4)")
    namespace = {"MODEL_TYPE": "vit_t", "CHECKPOINT_PATH": "mobile_sam.safetensors", "DEVICE": "cpu", "IMAGE": image}
    exec(compile(code, "<supervision docs example>", "exec", dont_inherit=True), namespace)  # noqa: S102
    records, detections = namespace["sam_result"], namespace["detections"]
    assert len(records) > 1 and len(detections) == len(records)
    # segment-anything's records: a bool mask each, the rest plain Python numbers and lists (json.dumps takes them)
    assert all(r["segmentation"].dtype == bool and r["segmentation"].shape == image.shape[:2] for r in records)
    # supervision sorts them largest first
    order = np.argsort([-r["area"] for r in records], kind="stable")
    assert np.array_equal(detections.mask, np.stack([records[i]["segmentation"] for i in order]))
    assert detections.area.tolist() == sorted((r["area"] for r in records), reverse=True)
    plain = [{**json.loads(json.dumps({k: v for k, v in r.items() if k != "segmentation"})),
              "segmentation": np.array(r["segmentation"])} for r in records]
    assert detections == sv.Detections.from_sam(plain)


@pytest.mark.parametrize(("example", "error"), [
    # classification/core: Classifications.from_ultralytics
    ("model = YOLO('yolov8n-cls.pt')", r"classification YOLO models are not available in mlx-zoo: classify images "
                                       r"with zoo.load\('resnet50'\)"),
    # annotators/core: OrientedBoxAnnotator
    ('model = YOLO("yolov8n-obb.pt")', "oriented-box \\(OBB\\) YOLO models are not available in mlx-zoo"),
    # depth/core: DepthMap.from_ultralytics
    ('model = YOLO("yolo26n-depth.pt")', "nor one of ultralytics' models mlx-zoo builds; the YOLO models here are"),
])
def test_models_not_built_are_one_error_naming_what_there_is(docs, example, error):
    with pytest.raises(ZooError, match=error):
        docs.once(f"import supervision as sv\nfrom ultralytics import YOLO\n\n{example}\n", ())
