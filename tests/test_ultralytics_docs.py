"""ultralytics' own Predict documentation run on mlx-zoo: the Python examples of docs/en/modes/predict.md, the Predict
sections of tasks/detect.md, segment.md and pose.md, and the guides that use predict's results
(isolating-segmentation-objects, view-results-in-terminal, yolo-common-issues, model-testing,
yolo-thread-safe-inference), as ultralytics 8.3 writes them, with ``from zoo import YOLO`` for ``from ultralytics
import YOLO``. Adapted only where no network or screen is here: the weights are synthetic (ZOO_WEIGHTS), the
https://ultralytics.com/images/ URLs are local copies of those files, cv2's window is a list of frames.
What mlx-zoo does not build (classification and OBB models, screenshots, YouTube, .streams, predict without a
source) is one error naming what to use (docs/yolov8.md)."""
from __future__ import annotations

import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageShow

from conftest import FIXTURES, synthetic_checkpoint, write_video
from zoo.errors import ZooError

IMPORT = ("from ultralytics import YOLO", "from zoo import YOLO")
URLS = ("https://ultralytics.com/images/", "")  # bus.jpg, zidane.jpg: local copies


def run(example: str, **names) -> dict:
    """The example with the import changed and ultralytics' image URLs read from the folder; its namespace."""
    code = example.replace(*IMPORT).replace(*URLS)
    assert "from zoo import YOLO" in code or "YOLO" not in code
    namespace = dict(names)
    exec(compile(code, "<ultralytics docs example>", "exec"), namespace)  # noqa: S102 - the docs' own code
    return namespace


@pytest.fixture
def docs_folder(tmp_path, monkeypatch):
    """The files the examples name, small, in the working folder; synthetic weights; viewers recorded."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ZOO_WEIGHTS", "synthetic")
    rng = np.random.default_rng(0)
    for name in ["bus.jpg", "zidane.jpg", "image1.jpg", "image2.jpg", "image.jpg", "path/to/image.jpg",
                 "path/to/your/image.jpg", "path/to/dir/a.jpg", "path/to/dir/sub/c.jpg", "path/to/test_images/t.jpg",
                 "ultralytics/assets/bus.jpg"]:
        Path(name).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (48, 64, 3), np.uint8)).save(name)
    Image.fromarray(rng.integers(0, 255, (40, 56, 3), np.uint8)).save("path/to/dir/b.jpg")
    write_video(Path("path/to/video.mp4"))
    Path("path/to/your/video").mkdir(parents=True)
    shutil.copy("path/to/video.mp4", "path/to/your/video/file.mp4")
    shutil.copy(FIXTURES / "yolov8" / "custom_best.pt", "path/to/best.pt")  # a `yolo train` best.pt, 3 classes
    shown = []
    monkeypatch.setattr(ImageShow, "show", lambda image, title=None, **options: shown.append(image.size) or True)
    return shown


RETURN_A_LIST = '''
from ultralytics import YOLO

# Load a model
model = YOLO("yolo11n.pt")  # pretrained YOLO11n model

# Run batched inference on a list of images
results = model(["image1.jpg", "image2.jpg"])  # return a list of Results objects

# Process results list
for result in results:
    boxes = result.boxes  # Boxes object for bounding box outputs
    masks = result.masks  # Masks object for segmentation masks outputs
    keypoints = result.keypoints  # Keypoints object for pose outputs
    probs = result.probs  # Probs object for classification outputs
    obb = result.obb  # Oriented boxes object for OBB outputs
    result.show()  # display to screen
    result.save(filename="result.jpg")  # save to disk
'''


@pytest.mark.parametrize("stream", [False, True])
def test_predict_returns_a_list_or_a_generator(docs_folder, stream):
    example = RETURN_A_LIST.replace('"image2.jpg"])', '"image2.jpg"], stream=True)') if stream else RETURN_A_LIST
    ns = run(example)
    assert isinstance(ns["results"], list) != stream
    assert type(ns["boxes"]).__name__ == "Boxes" and ns["masks"] is ns["keypoints"] is ns["probs"] is ns["obb"] is None
    assert docs_folder == [(64, 48), (64, 48)] and Image.open("result.jpg").size == (64, 48)


SOURCES = {  # the "Inference Sources" tabs: source line -> (results, the first one's path)
    'source = "path/to/image.jpg"': (1, "{cwd}/path/to/image.jpg"),
    'source = Image.open("path/to/image.jpg")': (1, "path/to/image.jpg"),
    'source = cv2.imread("path/to/image.jpg")': (1, "image0.jpg"),
    'source = np.random.randint(low=0, high=255, size=(640, 640, 3), dtype="uint8")': (1, "image0.jpg"),
    'source = "path/to/file.csv"': (6, "{cwd}/path/to/image.jpg"),  # ultralytics: the folder's images first
    'source = "path/to/video.mp4"': (3, "{cwd}/path/to/video.mp4"),
    'source = "path/to/dir"': (2, "{cwd}/path/to/dir/a.jpg"),
    'source = "path/to/dir/**/*.jpg"': (3, "{cwd}/path/to/dir/a.jpg"),
}


@pytest.mark.parametrize("source", SOURCES)
def test_inference_sources(docs_folder, source):
    # ultralytics' comma-separated list, its paths from the current folder (else from the list's)
    Path("path/to/file.csv").write_text("path/to/image.jpg,path/to/video.mp4,path/to/dir\n")
    stream = ", stream=True" if "video" in source or "dir" in source else ""
    ns = run(f'''
import cv2
import numpy as np
from PIL import Image

from ultralytics import YOLO

# Load a pretrained YOLO11n model
model = YOLO("yolo11n.pt")

{source}

# Run inference on the source
results = model(source{stream})  # list of Results objects
''')
    results = list(ns["results"])
    count, path = SOURCES[source]
    assert len(results) == count and all(r.orig_img.ndim == 3 for r in results)
    if path:
        assert results[0].path == path.format(cwd=Path.cwd())


@pytest.mark.parametrize(("source", "error"), [
    ('"screen"', "PIL.ImageGrab.grab"), ('"https://youtu.be/LNwODJXcvt4"', "yt-dlp -g"),
    ('"path/to/list.streams"', "each stream's address"),
    ('type("Tensor", (), {"__module__": "torch.nn"})()', r"PIL.Image.fromarray\(a\)")])
def test_sources_not_read_here_are_one_error_naming_what_to_pass(docs_folder, source, error):
    with pytest.raises(ZooError, match=error):
        run(f'from ultralytics import YOLO\nmodel = YOLO("yolo11n.pt")\nresults = model({source})')


def test_inference_arguments_save_into_the_run_folder(docs_folder):
    run('''
from ultralytics import YOLO

# Load a pretrained YOLO11n model
model = YOLO("yolo11n.pt")

# Run inference on 'bus.jpg' with arguments
model.predict("https://ultralytics.com/images/bus.jpg", save=True, imgsz=320, conf=0.25)
''')
    assert Image.open("runs/detect/predict/bus.jpg").size == (64, 48)


@pytest.mark.parametrize(("model", "part", "fields"), [
    ("yolo11n.pt", "boxes", ["cls", "conf", "data", "id", "is_track", "orig_shape", "xywh", "xywhn", "xyxy", "xyxyn"]),
    ("yolo11n-seg.pt", "masks", ["data", "orig_shape", "xy", "xyn"]),
    ("yolo11n-pose.pt", "keypoints", ["conf", "data", "orig_shape", "xy", "xyn"])])
def test_printing_boxes_masks_keypoints_lists_their_values(docs_folder, capsys, model, part, fields):
    """print(r.boxes) as ultralytics prints it (its SimpleClass): the class, then each attribute with its value."""
    ns = run(f'''
from ultralytics import YOLO

model = YOLO("{model}")

# Run inference on an image
results = model("https://ultralytics.com/images/bus.jpg")  # results list

# View results
for r in results:
    print(r.{part})
''')
    printed = capsys.readouterr().out
    assert printed.startswith(f"zoo.results.{part.capitalize()} object with attributes:\n\n")
    listed = [line.split(":")[0] for line in printed.splitlines() if line and not line[0].isspace()][1:]
    assert set(fields) <= set(listed) and listed == sorted(listed)
    assert f"orig_shape: {ns['r'].orig_shape!r}" in printed and f"shape: {getattr(ns['r'], part).shape!r}" in printed


@pytest.mark.parametrize(("model", "error"), [
    ("yolo11n-cls.pt", r"classification YOLO models are not available in mlx-zoo: classify images with "
                       r"zoo.load\('resnet50'\)"),
    ("yolo11n-obb.pt", r"oriented-box \(OBB\) YOLO models are not available"),
    ("yolo11n.yaml", r"builds an untrained model from ultralytics' yaml"),
    ("yolo26n.pt", r"no file of that name here, nor one of ultralytics' models mlx-zoo builds")])
def test_models_not_built_here_are_one_error_naming_those_there_are(docs_folder, model, error):
    with pytest.raises(ZooError, match=error + ".*detect \\(yolo11n.pt\\), segment"):
        run(f'from ultralytics import YOLO\nmodel = YOLO("{model}")\nresults = model("bus.jpg")')


def test_plotting_results(docs_folder):
    ns = run('''
from PIL import Image

from ultralytics import YOLO

# Load a pretrained YOLO11n model
model = YOLO("yolo11n.pt")

# Run inference on 'bus.jpg'
results = model(["https://ultralytics.com/images/bus.jpg", "https://ultralytics.com/images/zidane.jpg"])  # results list

# Visualize the results
for i, r in enumerate(results):
    # Plot results image
    im_bgr = r.plot()  # BGR-order numpy array
    im_rgb = Image.fromarray(im_bgr[..., ::-1])  # RGB-order PIL image

    # Show results to screen (in supported environments)
    r.show()

    # Save results to disk
    r.save(filename=f"results{i}.jpg")
''')
    assert ns["im_bgr"].shape == (48, 64, 3) and ns["im_bgr"].dtype == np.uint8 and ns["im_rgb"].mode == "RGB"
    assert docs_folder == [(64, 48)] * 2 and [Image.open(f"results{i}.jpg").size for i in range(2)] == [(64, 48)] * 2


def test_thread_safe_inference(docs_folder, monkeypatch):
    failures = []
    monkeypatch.setattr(threading, "excepthook", failures.append)
    predicted = []
    run('''
from threading import Thread

from ultralytics import YOLO


def thread_safe_predict(model, image_path):
    """Performs thread-safe prediction on an image using a locally instantiated YOLO model."""
    model = YOLO(model)
    results = model.predict(image_path)
    # Process results
    predicted.append(len(results))


# Starting threads that each have their own model instance
Thread(target=thread_safe_predict, args=("yolo11n.pt", "image1.jpg")).start()
Thread(target=thread_safe_predict, args=("yolo11n.pt", "image2.jpg")).start()
''', predicted=predicted)
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    assert failures == [] and predicted == [1, 1]


def test_one_model_shared_by_threads_gives_each_image_its_own_boxes(docs_folder, monkeypatch):
    """yolo-thread-safe-inference's "unsafe" example, one model in two threads: here each gets its image's boxes."""
    failures = []
    monkeypatch.setattr(threading, "excepthook", failures.append)
    boxes = {}
    ns = run('''
# Unsafe: Sharing a single model instance across threads
from threading import Thread

from ultralytics import YOLO

# Instantiate the model outside the thread
shared_model = YOLO("yolo11n.pt")


def predict(image_path):
    """Predicts objects in an image using a preloaded YOLO model, take path string to image as argument."""
    results = shared_model.predict(image_path)
    # Process results
    boxes[image_path] = results[0].boxes.data


# Starting threads that share the same model instance
Thread(target=predict, args=("image1.jpg",)).start()
Thread(target=predict, args=("image2.jpg",)).start()
''', boxes=boxes)
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    assert failures == [] and sorted(boxes) == ["image1.jpg", "image2.jpg"]
    for path, found in boxes.items():
        np.testing.assert_array_equal(found, ns["shared_model"].predict(path)[0].boxes.data)


def test_streaming_source_for_loop(docs_folder, monkeypatch):
    import cv2

    shown = []  # headless OpenCV has no windows: the frames the window would show
    monkeypatch.setattr(cv2, "imshow", lambda title, frame: shown.append(frame.shape), raising=False)
    monkeypatch.setattr(cv2, "waitKey", lambda delay: -1, raising=False)
    monkeypatch.setattr(cv2, "destroyAllWindows", lambda: None, raising=False)
    run('''
import cv2

from ultralytics import YOLO

# Load the YOLO model
model = YOLO("yolo11n.pt")

# Open the video file
video_path = "path/to/your/video/file.mp4"
cap = cv2.VideoCapture(video_path)

# Loop through the video frames
while cap.isOpened():
    # Read a frame from the video
    success, frame = cap.read()

    if success:
        # Run YOLO inference on the frame
        results = model(frame)

        # Visualize the results on the frame
        annotated_frame = results[0].plot()

        # Display the annotated frame
        cv2.imshow("YOLO Inference", annotated_frame)

        # Break the loop if 'q' is pressed
        if cv2.waitKey(1) & 0xFF == ord("q"):
            break
    else:
        # Break the loop if the end of the video is reached
        break

# Release the video capture object and close the display window
cap.release()
cv2.destroyAllWindows()
''')
    assert shown == [(64, 96, 3)] * 3


TASK_PREDICT = '''
from ultralytics import YOLO

# Load a model
model = YOLO("{official}")  # load an official model
model = YOLO("path/to/best.pt")  # load a custom model

# Predict with the model
results = model("https://ultralytics.com/images/bus.jpg")  # predict on an image

# Access the results
for result in results:
{access}
'''
DETECT_ACCESS = '''    xywh = result.boxes.xywh  # center-x, center-y, width, height
    xywhn = result.boxes.xywhn  # normalized
    xyxy = result.boxes.xyxy  # top-left-x, top-left-y, bottom-right-x, bottom-right-y
    xyxyn = result.boxes.xyxyn  # normalized
    names = [result.names[cls.item()] for cls in result.boxes.cls.int()]  # class name of each box
    confs = result.boxes.conf  # confidence score of each box'''
SEGMENT_ACCESS = '''    xy = result.masks.xy  # mask polygons in pixel coordinates
    xyn = result.masks.xyn  # normalized mask polygons
    masks = result.masks.data  # binary masks, shape (N,H,W), dtype torch.uint8'''
POSE_ACCESS = '''    xy = result.keypoints.xy  # x and y coordinates
    xyn = result.keypoints.xyn  # normalized
    kpts = result.keypoints.data  # x, y, visibility (if available)'''


def test_detect_task_predict(docs_folder):
    ns = run(TASK_PREDICT.format(official="yolo11n.pt", access=DETECT_ACCESS))
    n = len(ns["result"].boxes)
    assert n > 0 and ns["xywh"].shape == ns["xyxyn"].shape == (n, 4) and ns["confs"].dtype == np.float32
    assert set(ns["names"]) <= {"cat", "dog", "traffic cone"}  # the custom best.pt's classes


@pytest.mark.parametrize(("task", "access"), [("seg", SEGMENT_ACCESS), ("pose", POSE_ACCESS)])
def test_segment_and_pose_task_predict(docs_folder, task, access):
    best = synthetic_checkpoint(f"yolov8n-{task}", Path(f"best-{task}.safetensors"))  # a trained model's stand-in
    ns = run(TASK_PREDICT.format(official=f"yolo11n-{task}.pt", access=access).replace("path/to/best.pt", str(best)))
    n = len(ns["result"])
    if task == "seg":
        assert isinstance(ns["xy"], list) and len(ns["xy"]) == len(ns["xyn"]) == n
        assert ns["masks"].dtype == np.uint8 and ns["masks"].shape[0] == n
    else:
        assert ns["xy"].shape == ns["xyn"].shape == (n, 17, 2) and ns["kpts"].shape == (n, 17, 3)


ISOLATE = '''
from pathlib import Path

import cv2
import numpy as np

from ultralytics import YOLO

model = YOLO("yolo11n-seg.pt")
results = model.predict(source="path/to/image.jpg")

for r in results:
    img = np.copy(r.orig_img)
    img_name = Path(r.path).stem

    for ci, c in enumerate(r):
        label = c.names[c.boxes.cls.tolist().pop()]

        # Build a binary mask from the object contour
        b_mask = np.zeros(img.shape[:2], np.uint8)
        contour = c.masks.xy.pop().astype(np.int32).reshape(-1, 1, 2)
        cv2.drawContours(b_mask, [contour], -1, (255, 255, 255), cv2.FILLED)

        # Isolate the object (black background)
        mask3ch = cv2.cvtColor(b_mask, cv2.COLOR_GRAY2BGR)
        isolated = cv2.bitwise_and(mask3ch, img)  # transparent PNG: isolated = np.dstack([img, b_mask])

        # Optional: crop to the bounding box before saving
        x1, y1, x2, y2 = c.boxes.xyxy.cpu().numpy().squeeze().astype(np.int32)
        cv2.imwrite(f"{img_name}_{label}-{ci}.png", isolated[y1:y2, x1:x2])
'''


def test_isolating_segmentation_objects(docs_folder):
    ns = run(ISOLATE)
    n = len(ns["results"][0])
    assert n > 0 and ns["isolated"].shape == (48, 64, 3) and len(list(Path().glob("image_*-*.png"))) <= n
    run(ISOLATE.replace("contour = c.masks.xy.pop()", "contour = c.masks.xy[0]"))  # the guide's newer wording
    run(ISOLATE.replace('results = model.predict(source="path/to/image.jpg")',
                        'results = model.predict(source="path/to/image.jpg", save_crop=True)'))
    assert list(Path("runs/segment").glob("predict*/crops/*/image*.jpg"))


def test_predict_without_a_source_names_what_to_pass(docs_folder):
    """The guide's older wording, m.predict(): ultralytics then runs its bundled bus.jpg and zidane.jpg."""
    with pytest.raises(ZooError, match=r"predict\(\) needs a source: .*model.predict\('bus.jpg'\)"):
        run(ISOLATE.replace('model.predict(source="path/to/image.jpg")', "model.predict()"))


def test_guides_reading_results(docs_folder, capsys):
    import cv2

    ns = run('''
from ultralytics import YOLO

model = YOLO("yolo11n.pt")
results = model.predict(source="ultralytics/assets/bus.jpg")
plot = results[0].plot()
''')  # view-results-in-terminal (the sixel part needs a sixel terminal)
    assert ns["plot"].shape == (48, 64, 3) and cv2.imencode(".png", ns["plot"])[0]
    run('''
from ultralytics import YOLO

# Load a pretrained YOLO11 model
model = YOLO("yolo11n.pt")

# Specify the source image
source = "https://ultralytics.com/images/bus.jpg"

# Make predictions
results = model.predict(source, save=True, imgsz=320, conf=0.25)

# Extract bounding box dimensions
boxes = results[0].boxes.xywh.cpu()
for box in boxes:
    x, y, w, h = box
    print(f"Width of Box: {w}, Height of Box: {h}")
''')  # yolo-common-issues
    widths = [float(line.split()[3].rstrip(",")) for line in capsys.readouterr().out.splitlines()]
    assert widths and all(0 < w <= 64 for w in widths)
    ns = run('''
from ultralytics import YOLO

model = YOLO("yolo11n.pt")

# Run predictions on a folder of test images and save annotated results
results = model.predict(source="path/to/test_images", save=True)
''')  # model-testing
    assert Path(ns["results"][0].save_dir, "t.jpg").is_file()


# The CLI tabs of ultralytics' tasks/detect.md, segment.md and pose.md (8.x), and a tutorial's key=value form
CLI_EXAMPLES = [
    "yolo detect predict model=yolov8n.pt source='https://ultralytics.com/images/bus.jpg'  "
    "# predict with official model",
    "yolo detect predict model=path/to/best.pt source='https://ultralytics.com/images/bus.jpg'  "
    "# predict with custom model",
    "yolo segment predict model=yolov8n-seg.pt source='https://ultralytics.com/images/bus.jpg'  "
    "# predict with official model",
    "yolo pose predict model=yolov8n-pose.pt source='https://ultralytics.com/images/bus.jpg'  "
    "# predict with official model",
    "yolo predict model=yolov8n.pt source='https://ultralytics.com/images/bus.jpg' imgsz=320 conf=0.5 save_txt=True",
    'yolo task=detect mode=predict model="path/to/best.pt" source="image.jpg"',
]


@pytest.mark.parametrize("example", CLI_EXAMPLES)
def test_cli_tabs_run_with_yolo_replaced(example, docs_folder, capsys):
    """ultralytics' documented command lines, `yolo` replaced by `python -m zoo.run` (zoo/cli/yolo_command.py): each
    saves its annotated image into runs/<task>/predict and says so, as `yolo predict` does."""
    import shlex

    from zoo.run import main

    words = shlex.split(example.replace(*URLS), comments=True)
    assert words[0] == "yolo" and main(words[1:]) == 0
    task = next((word for word in words if word in ("segment", "pose")), "detect")
    source = next(word.partition("=")[2] for word in words if word.startswith("source="))
    assert Path(f"runs/{task}/predict/{source}").is_file()
    assert f"Results saved to runs/{task}/predict\n" in capsys.readouterr().err


@pytest.mark.parametrize("example, error", [
    ("yolo detect train data=coco8.yaml model=yolov8n.pt epochs=100 imgsz=640", "yolo train is not available"),
    ("yolo detect val model=yolov8n.pt", "yolo val is not available"),
    ("yolo export model=yolov8n.pt format=onnx", "yolo export is not available"),
    ("yolo classify predict model=yolov8n-cls.pt source='https://ultralytics.com/images/bus.jpg'",
     "task='classify': the YOLO models here make detect, segment, pose"),
])
def test_cli_tabs_not_built_are_one_error(example, error, docs_folder, capsys):
    import shlex

    from zoo.run import main

    assert main(shlex.split(example.replace(*URLS))[1:]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {error}") and err.count("\n") == 1 and not Path("runs").exists()
