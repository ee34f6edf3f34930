"""Other clients' own documentation run on mlx-zoo, example by example, as their pages write them:
segment-anything's README and notebooks (predictor_example.ipynb, automatic_mask_generator_example.ipynb) and
scripts/amg.py's generator flags, with ``from zoo.models.mobilesam import ...`` for ``from segment_anything import
...`` and MobileSAM's model type and checkpoint (its README's); IOPaint's README batch command, with ``python -m
zoo.run`` for ``iopaint run``; timm's quickstart, feature-extraction page and ResNet page, with ``zoo`` for
``timm`` and MLX's NHWC arrays where the pages make torch tensors. Adapted only where no network, GPU or torch is
here: the weights are synthetic and written in the test, the notebooks' photos are noise images of the photos'
sizes, MobileSAM's encoder input is 128 px (conftest's small_mobilesam), torch's tensors are numpy's (each such
line says so). What the pages print or promise is asserted, with the clients' values where they give them."""
from __future__ import annotations

import csv
import json
import shlex
from pathlib import Path

import cv2
import matplotlib
import numpy as np
import pytest
from PIL import Image

from conftest import synthetic_checkpoint

matplotlib.use("Agg")  # the notebooks' figures, drawn and never shown


def run(example: str, *replacements: tuple[str, str], **names) -> dict:
    """The example with ``replacements`` made (each must occur); its namespace."""
    for old, new in replacements:
        assert old in example, old
        example = example.replace(old, new)
    namespace = dict(names)
    exec(compile(example, "<client docs example>", "exec"), namespace)  # noqa: S102 - the docs' own code
    return namespace


# ---------------------------------------------------------------- segment-anything

SAM_IMPORT = ("from segment_anything import", "from zoo.models.mobilesam import")
SAM_MODEL = ('sam_checkpoint = "sam_vit_h_4b8939.pth"\nmodel_type = "vit_h"',  # MobileSAM's README: vit_t
             'sam_checkpoint = "mobile_sam.safetensors"\nmodel_type = "vit_t"')
TRUCK, GROCERIES = (1200, 1800), (770, 1024)  # the notebooks' photos, (height, width)
LOW_RES = 128 // 4  # the low-resolution logits of the 128 px encoder input (upstream's 1024: 256)


@pytest.fixture
def notebook_folder(tmp_path, monkeypatch, small_mobilesam):
    """The notebooks' folder: images/truck.jpg and images/groceries.jpg (noise of the photos' sizes), the weights."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "images").mkdir()
    rng = np.random.default_rng(0)
    for name, size in (("truck", TRUCK), ("groceries", GROCERIES)):
        cv2.imwrite(f"images/{name}.jpg", rng.integers(0, 256, (*size, 3), np.uint8))
    synthetic_checkpoint("mobilesam", tmp_path / "mobile_sam.safetensors")
    return tmp_path


# predictor_example.ipynb, "Set-up" to "Selecting objects with SAM" (the Colab and display cells left out)
PREDICTOR_SETUP = '''
import numpy as np
import torch
import matplotlib.pyplot as plt
import cv2

def show_mask(mask, ax, random_color=False):
    if random_color:
        color = np.concatenate([np.random.random(3), np.array([0.6])], axis=0)
    else:
        color = np.array([30/255, 144/255, 255/255, 0.6])
    h, w = mask.shape[-2:]
    mask_image = mask.reshape(h, w, 1) * color.reshape(1, 1, -1)
    ax.imshow(mask_image)

def show_points(coords, labels, ax, marker_size=375):
    pos_points = coords[labels==1]
    neg_points = coords[labels==0]
    ax.scatter(pos_points[:, 0], pos_points[:, 1], color='green', marker='*', s=marker_size, edgecolor='white', linewidth=1.25)
    ax.scatter(neg_points[:, 0], neg_points[:, 1], color='red', marker='*', s=marker_size, edgecolor='white', linewidth=1.25)

def show_box(box, ax):
    x0, y0 = box[0], box[1]
    w, h = box[2] - box[0], box[3] - box[1]
    ax.add_patch(plt.Rectangle((x0, y0), w, h, edgecolor='green', facecolor=(0,0,0,0), lw=2))

image = cv2.imread('images/truck.jpg')
image = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)

import sys
sys.path.append("..")
from segment_anything import sam_model_registry, SamPredictor

sam_checkpoint = "sam_vit_h_4b8939.pth"
model_type = "vit_h"

device = "cuda"

sam = sam_model_registry[model_type](checkpoint=sam_checkpoint)
sam.to(device=device)

predictor = SamPredictor(sam)

predictor.set_image(image)
'''
NO_TORCH = ("import torch\n", "")  # the notebook imports it for its torch.tensor boxes only


def predictor_notebook(*cells: str, replacements: tuple = ()) -> dict:
    return run(PREDICTOR_SETUP + "".join(cells), SAM_IMPORT, SAM_MODEL, NO_TORCH, *replacements, tensor=tensor)


# "Selecting objects with SAM", then "Specifying a specific object with additional points" (mask_input)
POINTS = '''
input_point = np.array([[500, 375]])
input_label = np.array([1])

masks, scores, logits = predictor.predict(
    point_coords=input_point,
    point_labels=input_label,
    multimask_output=True,
)
masks.shape  # (number_of_masks) x H x W

for i, (mask, score) in enumerate(zip(masks, scores)):
    plt.figure(figsize=(10,10))
    plt.imshow(image)
    show_mask(mask, plt.gca())
    show_points(input_point, input_label, plt.gca())
    plt.title(f"Mask {i+1}, Score: {score:.3f}", fontsize=18)
    plt.axis('off')
    plt.show()
    plt.close()

first = masks, scores, logits
input_point = np.array([[500, 375], [1125, 625]])
input_label = np.array([1, 1])

mask_input = logits[np.argmax(scores), :, :]  # Choose the model's best mask

masks, _, _ = predictor.predict(
    point_coords=input_point,
    point_labels=input_label,
    mask_input=mask_input[None, :, :],
    multimask_output=False,
)
masks.shape
refined = masks

input_point = np.array([[500, 375], [1125, 625]])
input_label = np.array([1, 0])

mask_input = logits[np.argmax(scores), :, :]  # Choose the model's best mask

masks, _, _ = predictor.predict(
    point_coords=input_point,
    point_labels=input_label,
    mask_input=mask_input[None, :, :],
    multimask_output=False,
)
'''

# "Specifying a specific object with a box", "Combining points and boxes"
BOXES = '''
input_box = np.array([425, 600, 700, 875])

masks, _, _ = predictor.predict(
    point_coords=None,
    point_labels=None,
    box=input_box[None, :],
    multimask_output=False,
)
box_masks = masks

plt.figure(figsize=(10, 10))
plt.imshow(image)
show_mask(masks[0], plt.gca())
show_box(input_box, plt.gca())
plt.axis('off')
plt.show()
plt.close()

input_box = np.array([425, 600, 700, 875])
input_point = np.array([[575, 750]])
input_label = np.array([0])

masks, _, _ = predictor.predict(
    point_coords=input_point,
    point_labels=input_label,
    box=input_box,
    multimask_output=False,
)
'''

# "Batched prompt inputs": predict_torch with boxes through predictor.transform
BATCHED_PROMPTS = '''
input_boxes = torch.tensor([
    [75, 275, 1725, 850],
    [425, 600, 700, 875],
    [1375, 550, 1650, 800],
    [1240, 675, 1400, 750],
], device=predictor.device)

transformed_boxes = predictor.transform.apply_boxes_torch(input_boxes, image.shape[:2])
masks, _, _ = predictor.predict_torch(
    point_coords=None,
    point_labels=None,
    boxes=transformed_boxes,
    multimask_output=False,
)

masks.shape  # (batch_size) x (num_predicted_masks_per_input) x H x W

plt.figure(figsize=(10, 10))
plt.imshow(image)
for mask in masks:
    show_mask(mask.cpu().numpy(), plt.gca(), random_color=True)
for box in input_boxes:
    show_box(box.cpu().numpy(), plt.gca())
plt.axis('off')
plt.show()
plt.close()
'''
# the notebook's torch tensors of boxes, as numpy arrays that answer .cpu().numpy() (zoo.results.TensorArray)
TORCH_BOXES = ("torch.tensor(", "tensor(")


def tensor(data, device=None):
    from zoo.results import TensorArray

    return np.asarray(data).view(TensorArray)


def test_sam_readme_getting_started(notebook_folder):
    # README.md, "Getting Started", its two blocks with MobileSAM's model type and checkpoint
    image = cv2.cvtColor(cv2.imread("images/groceries.jpg"), cv2.COLOR_BGR2RGB)
    ns = run('''
from segment_anything import SamPredictor, sam_model_registry
sam = sam_model_registry["<model_type>"](checkpoint="<path/to/checkpoint>")
predictor = SamPredictor(sam)
predictor.set_image(<your_image>)
masks, _, _ = predictor.predict(<input_prompts>)
''', SAM_IMPORT, ("<model_type>", "vit_t"), ("<path/to/checkpoint>", "mobile_sam.safetensors"),
        ("<your_image>", "image"), ("<input_prompts>", "point_coords=[[500, 300]], point_labels=[1]"), image=image)
    assert ns["masks"].shape == (3, *GROCERIES) and ns["masks"].dtype == bool
    ns = run('''
from segment_anything import SamAutomaticMaskGenerator, sam_model_registry
sam = sam_model_registry["<model_type>"](checkpoint="<path/to/checkpoint>")
mask_generator = SamAutomaticMaskGenerator(sam)
masks = mask_generator.generate(<your_image>)
''', SAM_IMPORT, ("<model_type>", "vit_t"), ("<path/to/checkpoint>", "mobile_sam.safetensors"),
        ("SamAutomaticMaskGenerator(sam)", "SamAutomaticMaskGenerator(sam, points_per_side=4)"),  # a small grid
        ("<your_image>", "image"), image=image)
    assert isinstance(ns["masks"], list)


def test_sam_predictor_notebook_points_and_mask_input(notebook_folder):
    ns = predictor_notebook(POINTS)
    masks, scores, logits = ns["first"]
    # what the notebook shows: three candidate masks of the photo's size, a score each, low-resolution logits
    assert masks.shape == (3, *TRUCK) and masks.dtype == bool and scores.shape == (3,)
    assert logits.shape == (3, LOW_RES, LOW_RES) and ns["refined"].shape == (1, *TRUCK)
    # the same values as the predictor's own calls (segment-anything's semantics: numpy in, numpy out)
    predictor = ns["predictor"]
    again = predictor.predict(point_coords=[[500, 375], [1125, 625]], point_labels=[1, 1],
                              mask_input=logits[scores.argmax()][None], multimask_output=False)
    assert np.array_equal(again[0], ns["refined"])


def test_sam_predictor_notebook_boxes(notebook_folder):
    ns = predictor_notebook(BOXES)
    assert ns["box_masks"].shape == (1, *TRUCK) and ns["masks"].shape == (1, *TRUCK)


def test_sam_predictor_notebook_batched_prompts(notebook_folder):
    ns = predictor_notebook(BATCHED_PROMPTS, replacements=(TORCH_BOXES,))
    masks = ns["masks"]
    assert masks.shape == (4, 1, *TRUCK) and masks.dtype == bool
    # the same masks as the four boxes given in the photo's pixels
    same, _, _ = ns["predictor"].predict(boxes=np.asarray(ns["input_boxes"]), multimask_output=False)
    assert np.array_equal(masks, same)


# "End-to-end batched inference"
END_TO_END = '''
image1 = image  # truck.jpg from above
image1_boxes = torch.tensor([
    [75, 275, 1725, 850],
    [425, 600, 700, 875],
    [1375, 550, 1650, 800],
    [1240, 675, 1400, 750],
], device=sam.device)

image2 = cv2.imread('images/groceries.jpg')
image2 = cv2.cvtColor(image2, cv2.COLOR_BGR2RGB)
image2_boxes = torch.tensor([
    [450, 170, 520, 350],
    [350, 190, 450, 350],
    [500, 170, 580, 350],
    [580, 170, 640, 350],
], device=sam.device)

from segment_anything.utils.transforms import ResizeLongestSide
resize_transform = ResizeLongestSide(sam.image_encoder.img_size)

def prepare_image(image, transform, device):
    image = transform.apply_image(image)
    image = torch.as_tensor(image, device=device.device)
    return image.permute(2, 0, 1).contiguous()

batched_input = [
     {
         'image': prepare_image(image1, resize_transform, sam),
         'boxes': resize_transform.apply_boxes_torch(image1_boxes, image1.shape[:2]),
         'original_size': image1.shape[:2]
     },
     {
         'image': prepare_image(image2, resize_transform, sam),
         'boxes': resize_transform.apply_boxes_torch(image2_boxes, image2.shape[:2]),
         'original_size': image2.shape[:2]
     }
]

batched_output = sam(batched_input, multimask_output=False)

batched_output[0].keys()

fig, ax = plt.subplots(1, 2, figsize=(20, 20))

ax[0].imshow(image1)
for mask in batched_output[0]['masks']:
    show_mask(mask.cpu().numpy(), ax[0], random_color=True)
for box in image1_boxes:
    show_box(box.cpu().numpy(), ax[0])
ax[0].axis('off')

ax[1].imshow(image2)
for mask in batched_output[1]['masks']:
    show_mask(mask.cpu().numpy(), ax[1], random_color=True)
for box in image2_boxes:
    show_box(box.cpu().numpy(), ax[1])
ax[1].axis('off')

plt.tight_layout()
plt.show()
plt.close()
'''


def test_sam_predictor_notebook_end_to_end_batched_inference(notebook_folder):
    ns = predictor_notebook(END_TO_END, replacements=(
        ("from segment_anything.utils.transforms import", "from zoo.models.mobilesam.predictor import"),
        TORCH_BOXES,  # torch's as_tensor(...).permute(2, 0, 1).contiguous() in numpy:
        ("torch.as_tensor(image, device=device.device)", "image"), (".permute(2, 0, 1).contiguous()", ".transpose(2, 0, 1)")))
    out = ns["batched_output"]
    assert [sorted(o) for o in out] == [["iou_predictions", "low_res_logits", "masks"]] * 2
    predictor = ns["predictor"]
    for o, image, boxes, size in zip(out, (ns["image1"], ns["image2"]), (ns["image1_boxes"], ns["image2_boxes"]),
                                     (TRUCK, GROCERIES)):
        assert o["masks"].shape == (4, 1, *size) and o["iou_predictions"].shape == (4, 1)
        assert o["low_res_logits"].shape == (4, 1, LOW_RES, LOW_RES)
        predictor.set_image(image)  # the same as the predictor's masks for these boxes
        assert np.array_equal(o["masks"], predictor.predict(boxes=np.asarray(boxes), multimask_output=False)[0])


# automatic_mask_generator_example.ipynb, "Automatic mask generation" and "Automatic mask generation options"
AMG = '''
import numpy as np
import torch
import matplotlib.pyplot as plt
import cv2

def show_anns(anns):
    if len(anns) == 0:
        return
    sorted_anns = sorted(anns, key=(lambda x: x['area']), reverse=True)
    ax = plt.gca()
    ax.set_autoscale_on(False)

    img = np.ones((sorted_anns[0]['segmentation'].shape[0], sorted_anns[0]['segmentation'].shape[1], 4))
    img[:,:,3] = 0
    for ann in sorted_anns:
        m = ann['segmentation']
        color_mask = np.concatenate([np.random.random(3), [0.35]])
        img[m] = color_mask
    ax.imshow(img)

image = cv2.imread('images/dog.jpg')
image = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)

import sys
sys.path.append("..")
from segment_anything import sam_model_registry, SamAutomaticMaskGenerator, SamPredictor

sam_checkpoint = "sam_vit_h_4b8939.pth"
model_type = "vit_h"

device = "cuda"

sam = sam_model_registry[model_type](checkpoint=sam_checkpoint)
sam.to(device=device)

mask_generator = SamAutomaticMaskGenerator(sam)

masks = mask_generator.generate(image)

print(len(masks))
print(masks[0].keys())

plt.figure(figsize=(20,20))
plt.imshow(image)
show_anns(masks)
plt.axis('off')
plt.show()
plt.close()

mask_generator_2 = SamAutomaticMaskGenerator(
    model=sam,
    points_per_side=32,
    pred_iou_thresh=0.86,
    stability_score_thresh=0.92,
    crop_n_layers=1,
    crop_n_points_downscale_factor=2,
    min_mask_region_area=100,  # Requires open-cv to run post-processing
)

masks2 = mask_generator_2.generate(image)

len(masks2)

plt.figure(figsize=(20,20))
plt.imshow(image)
show_anns(masks2)
plt.axis('off')
plt.show()
plt.close()
'''
RECORD_TYPES = {"segmentation": np.ndarray, "area": int, "bbox": list, "predicted_iou": float,
                "point_coords": list, "stability_score": float, "crop_box": list}  # segment-anything's


def test_sam_automatic_mask_generator_notebook(notebook_folder, capsys):
    # dog.jpg is 534 x 800; random weights pass upstream's thresholds rarely: a grid of 8 with the filters off
    cv2.imwrite("images/dog.jpg", np.random.default_rng(1).integers(0, 256, (534, 800, 3), np.uint8))
    ns = run(AMG, SAM_IMPORT, SAM_MODEL, NO_TORCH,
             ("SamAutomaticMaskGenerator(sam)", "SamAutomaticMaskGenerator(sam, points_per_side=8, "
                                                "pred_iou_thresh=0, stability_score_thresh=0)"),
             ("points_per_side=32,", "points_per_side=4,"))
    masks = ns["masks"]
    count, keys = capsys.readouterr().out.splitlines()[-2:]
    assert int(count) == len(masks) > 0
    assert keys == "dict_keys(['segmentation', 'area', 'bbox', 'predicted_iou', 'point_coords', " \
                   "'stability_score', 'crop_box'])"
    for record in masks + ns["masks2"]:
        assert {key: type(value) for key, value in record.items()} == RECORD_TYPES
        segmentation = record["segmentation"]
        assert segmentation.shape == (534, 800) and segmentation.dtype == bool
        assert record["area"] == segmentation.sum()
        assert all(type(v) is int for v in record["bbox"] + record["crop_box"])
        assert [type(v) for v in record["point_coords"][0]] == [float, float]


# scripts/amg.py's generator flags (get_amg_kwargs), each with a value that is not its default
AMG_FLAGS = {"points-per-side": 4, "points-per-batch": 8, "pred-iou-thresh": 0.5, "stability-score-thresh": 0.5,
             "stability-score-offset": 0.5, "box-nms-thresh": 0.5, "crop-n-layers": 1, "crop-nms-thresh": 0.5,
             "crop-overlap-ratio": 0.25, "crop-n-points-downscale-factor": 2, "min-mask-region-area": 10}


def test_amg_script_flags_on_everything(notebook_folder, capsys):
    from zoo.run import main

    argv = ["mobilesam", "images/groceries.jpg", "--everything", "--weights", "mobile_sam.safetensors",
            "--device", "cpu", "--out", "amg"]
    for flag, value in AMG_FLAGS.items():
        argv += [f"--{flag}", str(value)]
    assert main(argv) == 0
    capsys.readouterr()
    record = json.loads(Path("amg/groceries_masks.json").read_text())
    assert record["parameters"] == {flag.replace("-", "_"): value for flag, value in AMG_FLAGS.items()}


# ---------------------------------------------------------------- IOPaint

# README.md, "Batch processing"
IOPAINT_RUN = '''iopaint run --model=lama --device=cpu \\
--image=/path/to/image_folder \\
--mask=/path/to/mask_folder \\
--output=output_dir'''


@pytest.fixture
def iopaint_folders(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ZOO_WEIGHTS", "synthetic")
    images, masks = Path("path/to/image_folder"), Path("path/to/mask_folder")
    images.mkdir(parents=True)
    masks.mkdir(parents=True)
    rng = np.random.default_rng(2)
    hole = np.zeros((40, 56), np.uint8)
    hole[10:24, 8:30] = 255
    for stem in ("a", "b"):
        Image.fromarray(rng.integers(0, 256, (40, 56, 3), np.uint8)).save(images / f"{stem}.jpg")
        Image.fromarray(hole).save(masks / f"{stem}.png")
    return images, masks, hole >= 127


def iopaint_argv(command: str) -> list[str]:
    """IOPaint's command with ``iopaint run`` as ``python -m zoo.run`` and its absolute example paths relative,
    its lines joined as the shell joins them."""
    argv = shlex.split(command.replace("\\\n", " ").replace("=/path/", "=path/"))
    assert argv[:2] == ["iopaint", "run"]
    return argv[2:]


def test_iopaint_batch_command_as_written(iopaint_folders, capsys):
    """`--model=lama` named the model as IOPaint does; it was 'unrecognized arguments: --model=lama'."""
    from zoo.run import main

    images, _, hole = iopaint_folders
    assert main(iopaint_argv(IOPAINT_RUN)) == 0
    assert "error" not in capsys.readouterr().err
    assert_inpainted(images, hole)


def assert_inpainted(images: Path, hole: np.ndarray) -> None:
    """IOPaint's outputs (batch_processing.py): <stem>.png for each image; ours: every known pixel kept."""
    assert sorted(p.name for p in Path("output_dir").glob("*.png")) == ["a.png", "b.png"]
    for stem in ("a", "b"):
        got = np.asarray(Image.open(f"output_dir/{stem}.png"))
        assert np.array_equal(got[~hole], np.asarray(Image.open(images / f"{stem}.jpg").convert("RGB"))[~hole])


def test_iopaint_one_mask_file_for_every_image(iopaint_folders, capsys):
    """README: 'When --mask is a path to a mask file, all images will be processed using this mask.'"""
    from zoo.run import main

    images, masks, hole = iopaint_folders
    (masks / "b.png").unlink()  # one mask, named after neither image
    (masks / "a.png").rename(masks / "hole.png")
    command = IOPAINT_RUN.replace("--mask=/path/to/mask_folder", "--mask=/path/to/mask_folder/hole.png")
    assert main(iopaint_argv(command)) == 0
    assert "skipped" not in capsys.readouterr().err
    assert_inpainted(images, hole)


def test_the_model_option_and_the_model_name_must_agree(capsys):
    from conftest import cli_error

    assert "--model lama and MODEL yolov8 name two models: give one of them" in cli_error(
        ["yolov8", "--model=lama", "--image=x", "--mask=y"], capsys)
