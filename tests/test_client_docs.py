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

import json
import shlex
from pathlib import Path

import cv2
import matplotlib
import mlx.core as mx
import numpy as np
import pytest
from PIL import Image

import zoo
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
TRUCK, GROCERIES = (1200, 1800), (534, 800)  # the notebooks' photos, (height, width)
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
    ax.scatter(pos_points[:, 0], pos_points[:, 1], color='green', marker='*', s=marker_size, \
edgecolor='white', linewidth=1.25)
    ax.scatter(neg_points[:, 0], neg_points[:, 1], color='red', marker='*', s=marker_size, \
edgecolor='white', linewidth=1.25)

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
        ("torch.as_tensor(image, device=device.device)", "image"),
        (".permute(2, 0, 1).contiguous()", ".transpose(2, 0, 1)")))
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


# ---------------------------------------------------------------- timm

TIMM = [("import timm", "import zoo as timm"),  # zoo's create_model and list_models are timm's calls
        ("import torch", "import mlx.core as mx")]  # torch.randn(N, 3, H, W) -> mx.random.normal((N, H, W, 3))


def randn(size: str) -> tuple[str, str]:
    n, _, h, w = (d.strip() for d in size.split(","))
    return f"torch.randn({size})", f"mx.random.normal(({n}, {h}, {w}, 3))"


def nhwc(printed: str) -> str:
    """timm's printed torch.Size([N, C, H, W]) as our NHWC shape tuple prints; torch.Size([N, C]) as (N, C)."""
    import re

    def tuple_of(match):
        dims = [int(d) for d in match.group(1).split(", ")]
        return str(tuple(dims if len(dims) == 2 else [dims[0], *dims[2:], dims[1]]))

    return re.sub(r"torch\.Size\(\[([\d, ]+)\]\)", tuple_of, printed)


# feature_extraction.mdx: each example with resnet50 for the page's model, and the lines timm 1.0.31 prints for
# resnet50 (run 2026-11-30 in /work/venv-torch-cpu-speed); the page's own outputs where its model gives resnet50's
FEATURE_EXTRACTION = {
    "forward_features()": ('''
>>> import torch
>>> import timm
>>> m = timm.create_model('xception41', pretrained=True)
>>> o = m(torch.randn(2, 3, 299, 299))
>>> print(f'Original shape: {o.shape}')
>>> o = m.forward_features(torch.randn(2, 3, 299, 299))
>>> print(f'Unpooled shape: {o.shape}')
''', "xception41", "2, 3, 299, 299",
        "Original shape: torch.Size([2, 1000])\nUnpooled shape: torch.Size([2, 2048, 10, 10])"),
    "Create with no classifier and pooling": ('''
>>> import torch
>>> import timm
>>> m = timm.create_model('resnet50', pretrained=True, num_classes=0, global_pool='')
>>> o = m(torch.randn(2, 3, 224, 224))
>>> print(f'Unpooled shape: {o.shape}')
''', "resnet50", "2, 3, 224, 224", "Unpooled shape: torch.Size([2, 2048, 7, 7])"),
    "Remove it later (unpooled)": ('''
>>> import torch
>>> import timm
>>> m = timm.create_model('densenet121', pretrained=True)
>>> o = m(torch.randn(2, 3, 224, 224))
>>> print(f'Original shape: {o.shape}')
>>> m.reset_classifier(0, '')
>>> o = m(torch.randn(2, 3, 224, 224))
>>> print(f'Unpooled shape: {o.shape}')
''', "densenet121", "2, 3, 224, 224",
        "Original shape: torch.Size([2, 1000])\nUnpooled shape: torch.Size([2, 2048, 7, 7])"),
    "Chaining unpooled output to classifier": ('''
>>> model = timm.create_model('vit_medium_patch16_reg1_gap_256', pretrained=True)
>>> output = model.forward_features(torch.randn(2,3,256,256))
>>> print('Unpooled output shape:', output.shape)
>>> classified = model.forward_head(output)
>>> print('Classification output shape:', classified.shape)
''', "vit_medium_patch16_reg1_gap_256", "2,3,256,256",
        "Unpooled output shape: torch.Size([2, 2048, 8, 8])\nClassification output shape: torch.Size([2, 1000])"),
    "Create with no classifier": ('''
>>> import torch
>>> import timm
>>> m = timm.create_model('resnet50', pretrained=True, num_classes=0)
>>> o = m(torch.randn(2, 3, 224, 224))
>>> print(f'Pooled shape: {o.shape}')
''', "resnet50", "2, 3, 224, 224", "Pooled shape: torch.Size([2, 2048])"),
    "Remove it later (pooled)": ('''
>>> import torch
>>> import timm
>>> m = timm.create_model('ese_vovnet19b_dw', pretrained=True)
>>> o = m(torch.randn(2, 3, 224, 224))
>>> print(f'Original shape: {o.shape}')
>>> m.reset_classifier(0)
>>> o = m(torch.randn(2, 3, 224, 224))
>>> print(f'Pooled shape: {o.shape}')
''', "ese_vovnet19b_dw", "2, 3, 224, 224",
        "Original shape: torch.Size([2, 1000])\nPooled shape: torch.Size([2, 2048])"),
    "Create a feature map extraction model": ('''
>>> import torch
>>> import timm
>>> m = timm.create_model('resnest26d', features_only=True, pretrained=True)
>>> o = m(torch.randn(2, 3, 224, 224))
>>> for x in o:
...     print(x.shape)
''', "resnest26d", "2, 3, 224, 224", "torch.Size([2, 64, 112, 112])\ntorch.Size([2, 256, 56, 56])\n"
        "torch.Size([2, 512, 28, 28])\ntorch.Size([2, 1024, 14, 14])\ntorch.Size([2, 2048, 7, 7])"),  # the page's
    "Query the feature information": ('''
>>> import torch
>>> import timm
>>> m = timm.create_model('regnety_032', features_only=True, pretrained=True)
>>> print(f'Feature channels: {m.feature_info.channels()}')
>>> o = m(torch.randn(2, 3, 224, 224))
>>> for x in o:
...     print(x.shape)
''', "regnety_032", "2, 3, 224, 224", "Feature channels: [64, 256, 512, 1024, 2048]\ntorch.Size([2, 64, 112, 112])\n"
        "torch.Size([2, 256, 56, 56])\ntorch.Size([2, 512, 28, 28])\ntorch.Size([2, 1024, 14, 14])\n"
        "torch.Size([2, 2048, 7, 7])"),
    "Flexible intermediate feature map extraction": ('''
model = timm.create_model('vit_medium_patch16_reg1_gap_256', pretrained=True)
output, intermediates = model.forward_intermediates(torch.randn(2,3,256,256))
for i, o in enumerate(intermediates):
    print(f'Feat index: {i}, shape: {o.shape}')
''', "vit_medium_patch16_reg1_gap_256", "2,3,256,256", "Feat index: 0, shape: torch.Size([2, 64, 128, 128])\n"
        "Feat index: 1, shape: torch.Size([2, 256, 64, 64])\nFeat index: 2, shape: torch.Size([2, 512, 32, 32])\n"
        "Feat index: 3, shape: torch.Size([2, 1024, 16, 16])\nFeat index: 4, shape: torch.Size([2, 2048, 8, 8])"),
}


def doctest_source(example: str) -> str:
    """The page's >>> / ... lines as a script (the examples without prompts pass unchanged)."""
    lines = [line[4:] for line in example.splitlines() if line.startswith((">>> ", "... "))]
    return "\n".join(lines) if lines else example


@pytest.fixture
def synthetic_weights(monkeypatch):
    monkeypatch.setenv("ZOO_WEIGHTS", "synthetic")  # pretrained=True: the Hub's weights, synthetic ones here


@pytest.mark.parametrize("section", FEATURE_EXTRACTION)
def test_timm_feature_extraction_page(synthetic_weights, capsys, section):
    example, model, size, printed = FEATURE_EXTRACTION[section]
    source = doctest_source(example)  # the page's later examples use the imports of its first ones
    run(source, *(TIMM if "import timm" in source else ()), (f"'{model}'", "'resnet50'"), randn(size),
        timm=zoo, mx=mx)
    assert capsys.readouterr().out.strip() == nhwc(printed)


def test_timm_prune_intermediate_layers(synthetic_weights, capsys):
    """feature_extraction.mdx's prune_intermediate_layers example; it was an AttributeError. The parameters are
    counted with MLX's tree_flatten (timm: p.numel() of torch's parameters()); ours count BatchNorm's running
    statistics too (MLX keeps them as arrays of the module): timm 1.0.31 gives resnet50 25557032 -> 8543296."""
    from mlx.utils import tree_flatten

    run(doctest_source('''
model = timm.create_model('vit_medium_patch16_reg1_gap_256', pretrained=True)
print('Original params:', sum([p.numel() for p in model.parameters()]))

indices = model.prune_intermediate_layers(indices=(-2,), prune_head=True, prune_norm=True)  \
# prune head, norm, last block
print('Pruned params:', sum([p.numel() for p in model.parameters()]))

intermediates = model.forward_intermediates(torch.randn(2,3,256,256), indices=indices, intermediates_only=True)  \
# return penultimate intermediate
for o in intermediates:
    print(f'Feat shape: {o.shape}')
'''), ("'vit_medium_patch16_reg1_gap_256'", "'resnet50'"), randn("2,3,256,256"),
        ("[p.numel() for p in model.parameters()]", "[p.size for _, p in tree_flatten(model.parameters())]"),
        timm=zoo, mx=mx, tree_flatten=tree_flatten)
    original, pruned, feature = capsys.readouterr().out.strip().splitlines()
    assert original == "Original params: 25610152" and pruned == "Pruned params: 8573888"  # 53120, 30592 BN stats
    assert feature == nhwc("Feat shape: torch.Size([2, 1024, 16, 16])")  # timm 1.0.31's for resnet50
    backbone = zoo.create_model("resnet18", features_only=True, out_indices=(1, 2))
    with pytest.raises(zoo.ZooError, match="a features_only model keeps only the stages of its out_indices"):
        backbone.prune_intermediate_layers(indices=(-2,))


def test_timm_quickstart(synthetic_weights, capsys):
    """quickstart.mdx: "Load a Pretrained Model", "List Models with Pretrained Weights", "Fine-Tune a Pretrained
    Model", "Use a Pretrained Model for Feature Extraction" (resnet50 for mobilenetv3_large_100)."""
    ns = run(doctest_source('''
>>> import timm
>>> m = timm.create_model('mobilenetv3_large_100', pretrained=True)
>>> m.eval()
>>> from pprint import pprint
>>> model_names = timm.list_models(pretrained=True)
>>> pprint(model_names)
>>> model_names = timm.list_models('*resne*t*')
>>> pprint(model_names)
>>> model = timm.create_model('mobilenetv3_large_100', pretrained=True, num_classes=NUM_FINETUNE_CLASSES)
>>> import torch
>>> x = torch.randn(1, 3, 224, 224)
>>> model = timm.create_model('mobilenetv3_large_100', pretrained=True)
>>> features = model.forward_features(x)
>>> print(features.shape)
'''), *TIMM, ("'mobilenetv3_large_100'", "'resnet50'"), randn("1, 3, 224, 224"), NUM_FINETUNE_CLASSES=10)
    assert ns["m"].eval() is ns["m"] and not ns["m"].training  # timm's eval(): the model, for chaining
    resnets = [f"resnet{d}" for d in (18, 34, 50, 101, 152)]
    assert ns["model_names"] == resnets and [f"{r}.tv_in1k" for r in resnets] <= zoo.list_models(pretrained=True)
    assert capsys.readouterr().out.strip().splitlines()[-1] == nhwc("torch.Size([1, 2048, 7, 7])")  # timm's resnet50


# timm.data.resolve_data_config({}, model=m) and resolve_model_data_config(m) of zoo.create_model("resnet18"):
# what timm 1.0.31 returned (2026-11-30, /work/venv-torch-cpu-speed); create_transform(**it) gave
# m.preprocess_image's values exactly (channels first)
TIMM_DATA_CONFIG = {"input_size": (3, 224, 224), "interpolation": "bilinear", "mean": (0.485, 0.456, 0.406),
                    "std": (0.229, 0.224, 0.225), "crop_pct": 0.875, "crop_mode": "center"}


def timm_transform(image: Image.Image, config: dict) -> np.ndarray:
    """timm's create_transform(**config) for eval, on a PIL image, as torchvision computes it: the shorter side to
    input_size / crop_pct (the longer one truncated), Pillow's filter, the centre crop (offset rounded), /255,
    normalised; HWC."""
    _, size, _ = config["input_size"]
    scale = int(size / config["crop_pct"])
    w, h = image.size
    new = (scale, int(scale * h / w)) if w <= h else (int(scale * w / h), scale)
    resized = image.resize(new, Image.BILINEAR)
    left, top = int(round((new[0] - size) / 2)), int(round((new[1] - size) / 2))
    x = np.asarray(resized.crop((left, top, left + size, top + size)), np.float32) / 255
    return (x - np.array(config["mean"], np.float32)) / np.array(config["std"], np.float32)


def test_timm_resnet_page_top5(synthetic_weights, tmp_path, monkeypatch, capsys):
    """models/resnet.mdx, "How do I use this model on an image?": its data config is what the weights were
    trained with, and the top 5 printed are predict's. Lines that need torch or timm.data are MLX's (each
    replacement below), the downloads are local files."""
    monkeypatch.chdir(tmp_path)
    Image.fromarray(np.random.default_rng(5).integers(0, 256, (300, 260, 3), np.uint8)).save("dog.jpg")
    from zoo import models

    Path("imagenet_classes.txt").write_bytes((Path(models.__file__).parent / "data/imagenet_classes.txt").read_bytes())
    ns = run(doctest_source('''
>>> import timm
>>> model = timm.create_model('resnet18', pretrained=True)
>>> model.eval()
>>> import urllib
>>> from PIL import Image
>>> from timm.data import resolve_data_config
>>> from timm.data.transforms_factory import create_transform
>>> config = resolve_data_config({}, model=model)
>>> transform = create_transform(**config)
>>> url, filename = ("https://github.com/pytorch/hub/raw/master/images/dog.jpg", "dog.jpg")
>>> urllib.request.urlretrieve(url, filename)
>>> img = Image.open(filename).convert('RGB')
>>> tensor = transform(img).unsqueeze(0) # transform and add batch dimension
>>> import torch
>>> with torch.inference_mode():
...     out = model(tensor)
>>> probabilities = torch.nn.functional.softmax(out[0], dim=0)
>>> print(probabilities.shape)
>>> url, filename = ("https://raw.githubusercontent.com/pytorch/hub/master/imagenet_classes.txt", \
"imagenet_classes.txt")
>>> urllib.request.urlretrieve(url, filename) 
>>> with open("imagenet_classes.txt", "r") as f:
...     categories = [s.strip() for s in f.readlines()]
>>> top5_prob, top5_catid = torch.topk(probabilities, 5)
>>> for i in range(top5_prob.size(0)):
...     print(categories[top5_catid[i]], top5_prob[i].item())
'''), *TIMM,
        ("from timm.data import resolve_data_config\n", ""),
        ("from timm.data.transforms_factory import create_transform\n", ""),
        ("config = resolve_data_config({}, model=model)", "config = model.pretrained_cfg"),  # what timm's reads
        ("transform = create_transform(**config)", "transform = model.preprocess_image"),
        ("transform(img).unsqueeze(0)", "mx.array(transform(img))[None]"),  # NHWC
        ("urllib.request.urlretrieve(url, filename)", "pass"),
        ("with torch.inference_mode():\n    out = model(tensor)", "out = model(tensor)"),
        ("torch.nn.functional.softmax(out[0], dim=0)", "mx.softmax(out[0], axis=0)"),
        ("torch.topk(probabilities, 5)", "[probabilities[top5 := mx.argsort(-probabilities)[:5]], top5]"),
        ("top5_prob.size(0)", "top5_prob.size"), ("categories[top5_catid[i]]", "categories[top5_catid[i].item()]"),
        mx=mx)
    assert {key: ns["config"][key] for key in TIMM_DATA_CONFIG} == TIMM_DATA_CONFIG
    image = Image.open("dog.jpg").convert("RGB")
    assert np.abs(ns["tensor"][0] - timm_transform(image, TIMM_DATA_CONFIG)).max() < 1e-6
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[0] == "(1000,)"  # torch.Size([1000])
    expected = ns["model"].predict("dog.jpg", top_k=5)
    assert [line.rsplit(" ", 1)[0] for line in printed[1:]] == [label for _, label, _ in expected]
    assert [float(line.rsplit(" ", 1)[1]) for line in printed[1:]] == pytest.approx([p for *_, p in expected], rel=1e-5)


def test_iopaint_concat(iopaint_folders, capsys):
    """`iopaint run ... --concat` ("Concat original image, mask and output images into one image", its cli.py) was
    'unrecognized arguments': each output is the image, the hole in white and the result side by side, the result
    the one of the run without it; a folder of such strips is not taken for one of plain outputs."""
    from conftest import cli_error
    from zoo.run import main

    images, _, hole = iopaint_folders
    assert main(iopaint_argv(IOPAINT_RUN.replace("output_dir", "plain"))) == 0
    assert main(iopaint_argv(IOPAINT_RUN + " --concat")) == 0
    capsys.readouterr()
    for stem in ("a", "b"):
        strip = np.asarray(Image.open(f"output_dir/{stem}.png"))
        image, mask, result = np.split(strip, 3, axis=1)
        assert np.array_equal(image, np.asarray(Image.open(images / f"{stem}.jpg").convert("RGB")))
        assert np.array_equal(mask, np.repeat(hole[..., None] * np.uint8(255), 3, axis=2))
        assert np.array_equal(result, np.asarray(Image.open(f"plain/{stem}.png")))
    assert "holds results of --concat, not --concat (not given)" in cli_error(
        iopaint_argv(IOPAINT_RUN), capsys)
