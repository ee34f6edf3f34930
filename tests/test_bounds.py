"""Memory bounded by what the input justifies, checked before allocating: an image's shape against
what the model resizes it to, a checkpoint's header against the model it must hold."""
from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

import zoo
from conftest import PEAK_RSS_KB, synthetic_checkpoint
from test_bombs import safetensors_bytes
from torch_writer import Call, Glob, tensor, write_torch_zip
from zoo import registry
from zoo.errors import ZooError
from zoo.weights import checkpoint, torchfile


@pytest.fixture
def nothing_read(monkeypatch):
    """Fails the test if any tensor's bytes are read (safetensors or torch storages)."""
    def refuse(*args):
        raise AssertionError("a tensor was read")

    monkeypatch.setattr(checkpoint, "_read_tensor", refuse)
    monkeypatch.setattr(torchfile, "_storage_elements", refuse)


def sparse_safetensors(path, name: str = "weight", gib: int = 3):
    """One BF16 tensor of ``gib`` GiB, all holes: the file takes no disk."""
    path.write_bytes(safetensors_bytes({name: {"dtype": "BF16", "shape": [gib << 29], "data_offsets": [0, gib << 30]}},
                                       b""))
    with open(path, "r+b") as file:
        file.truncate(file.seek(0, 2) + (gib << 30))
    return path


def test_a_checkpoint_whose_header_claims_too_much_is_refused_before_reading(tmp_path, nothing_read):
    path = sparse_safetensors(tmp_path / "sparse.safetensors", "conv1.weight")
    with pytest.raises(ZooError, match="its header claims 6,442,450,944 bytes of tensors, more than 4x the "
                                       "46,796,528 bytes of resnet18's weights; nothing was read"):
        zoo.load("resnet18", weights=path)
    with pytest.raises(ZooError, match="more than 4x the .* bytes of any registered model's weights"):
        zoo.load(path)  # a checkpoint named as the model: bounded by the largest registered model
    stride_0 = Call(Glob("torch._utils", "_rebuild_tensor_v2"),  # 2**38 float32 on 16 bytes
                    (np.zeros(4, np.float32), 0, (2**18, 2**20), (0, 0), False, {}))
    lie = write_torch_zip(tmp_path / "lie.pt", {"conv1.weight": stride_0})
    with pytest.raises(ZooError, match="its header claims 1,099,511,627,776 bytes"):
        zoo.load("resnet18", weights=lie)


def test_weights_of_another_model_are_refused_from_their_names_before_reading(tmp_path, nothing_read):
    yolo = synthetic_checkpoint("yolov8n", tmp_path / "yolo.safetensors")
    with pytest.raises(ZooError, match=r"weights .*yolo.safetensors do not match resnet18: missing 102 "
                                       r"\(bn1.bias, .*; unexpected 298 \(model.0.bn.bias"):
        zoo.load("resnet18", weights=yolo)
    torch_file = write_torch_zip(tmp_path / "other.pt", {"state_dict": {"encoder.weight": tensor([1.0, 2.0])}})
    with pytest.raises(ZooError, match="do not match mobilesam: missing .*; unexpected 1 \\(encoder.weight\\)"):
        zoo.load("mobilesam", weights=torch_file)
    with pytest.raises(ZooError, match="no generator.\\* weights"):  # LaMa's own naming rule, on the header
        zoo.load("lama", weights=torch_file)


def test_headers_describe_what_the_reader_returns(tmp_path):
    """read_checkpoint_header: the names, shapes and dtypes read_checkpoint gives, without the bytes."""
    path = synthetic_checkpoint("resnet18", tmp_path / "r.safetensors")
    torch_path = write_torch_zip(tmp_path / "r.pt", {"model": {"a": tensor([[1.0, 2.0, 3.0]]), "n": tensor([1])}})
    for file in (path, torch_path):
        header, _ = checkpoint.read_checkpoint_header(file)
        weights = checkpoint.read_checkpoint(file)
        assert {n: (t.shape, t.dtype, t.nbytes) for n, t in header.items()} == \
               {n: (a.shape, a.dtype, a.nbytes) for n, a in weights.items()}


def test_a_strip_is_refused_before_resnet_enlarges_it(tmp_path):
    """1x5000 took 3.3 GB (shorter side to 256: 256x1280000); refused from its size, in a child
    whose peak RSS stays under 1 GB (the model and MLX included)."""
    Image.new("RGB", (1, 5000)).save(tmp_path / "strip.png")
    child = (PEAK_RSS_KB + "import sys, zoo\nfrom zoo.errors import ZooError\n"
             "try:\n    zoo.load('resnet18', weights='synthetic', device='cpu').predict(sys.argv[1])\n"
             "except ZooError as e:\n    print(e)\n"
             "print(peak_rss_kb())")
    done = subprocess.run([sys.executable, "-c", child, str(tmp_path / "strip.png")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    message, peak_kb = done.stdout.splitlines()
    assert message.startswith("the image is 1x5000: resizing its shorter side to 256 makes it 256x1280000 "
                              "(327,680,000 pixels), above the limit of 89,478,485 pixels: crop it to an aspect "
                              "ratio of at most 1:1365")
    assert int(peak_kb) < 1 << 20


def test_the_pixel_limit_sets_the_resize_bound(monkeypatch):
    model = zoo.load("resnet18", weights="synthetic", device="cpu")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 256 * 256 * 3)  # what ZOO_MAX_IMAGE_PIXELS sets
    assert model.preprocess_image(np.zeros((1, 3, 3), np.uint8)).shape == (224, 224, 3)  # 256x768 fits
    with pytest.raises(ZooError, match="the image is 4x1: .* makes it 1024x256 .* at most 1:3, or set"):
        model.preprocess_image(np.zeros((1, 4, 3), np.uint8))


@pytest.fixture(scope="module")
def small_sam():
    spec = dataclasses.replace(registry.get_spec("mobilesam"), preprocess={"image_size": 128})
    return registry.build(spec, registry.read_weights(spec, "synthetic:0"))


@pytest.mark.parametrize("shape", [(1, 600), (600, 1)])
def test_mobilesam_segments_a_strip(small_sam, shape):
    """Its short side rounded to 0 pixels at 128 (ValueError before): one pixel is kept."""
    predictor = small_sam.predictor()
    predictor.set_image(np.full((*shape, 3), 200, np.uint8))
    assert predictor.input_size == ((1, 128) if shape[0] == 1 else (128, 1))
    masks, scores, _ = predictor.predict(point_coords=[[0, 0]], point_labels=[1], multimask_output=False)
    assert masks.shape == (1, *shape) and np.isfinite(scores).all()


@pytest.mark.parametrize("shape", [(6000, 1), (1, 6000)])
def test_retina_masks_of_a_strip_come_from_its_row_or_column_of_the_maps(shape):
    """A strip is under one cell wide on the 160x160 prototype grid: its padding cut off left nothing and
    --retina-masks failed (internal error, IndexError); now the centre row / column is resized."""
    from zoo.instances import scale_masks

    maps = np.broadcast_to(np.arange(160, dtype=np.float32), (1, 160, 160))  # each cell holds its column
    maps = maps if shape[1] == 1 else maps.transpose(0, 2, 1).copy()  # or its row
    out = scale_masks(maps, shape)
    assert out.shape == (1, *shape) and np.all(out == 80)


@pytest.fixture
def masks_bound(monkeypatch):
    """check_retina_masks' bound lowered to 40,000 bytes of masks (no cost for the rest of the run)."""
    from zoo import instances

    monkeypatch.setattr(instances, "PROCESS_BOUND", 40_000)
    monkeypatch.setattr(instances, "RETINA_RUN_BYTES", 0)
    monkeypatch.setattr(instances, "RETINA_BYTES_PER_PIXEL", 0)


def test_retina_masks_beyond_the_bound_are_refused_before_allocating(masks_bound):
    """300 image-size masks of an 8000x8000 photo (17.9 GiB) ended in internal error (MemoryError); the count
    and size are checked after NMS, before the masks are made."""
    from zoo.instances import process_mask_native

    protos, coefficients = np.ones((40, 40, 32), np.float32), np.ones((5, 32), np.float32)
    boxes = np.array([[0, 0, 150, 100]] * 5, np.float32)
    with pytest.raises(ZooError, match=r"^5 masks at the image's size 150x100 take 0.0 GiB, more than the 0 MiB "
                                       r"that fit beside the image within 2 GiB: keep at most 2 detections "
                                       r"\(max_det=2\) or make them at the model's input size \(retina_masks=False\)$"):
        process_mask_native(protos, coefficients, boxes, (100, 150))
    assert process_mask_native(protos, coefficients[:2], boxes[:2], (100, 150)).all()


def test_a_folder_run_refuses_only_the_image_whose_retina_masks_do_not_fit(tmp_path, monkeypatch, masks_bound, capsys):
    from yolo_tasks_fixtures import rebuild
    from zoo.run import main

    from test_yolo_tasks_cli import FAST, fixture_image

    seg = rebuild("yolov8n-seg", tmp_path / "seg.pt")
    images = tmp_path / "images"
    images.mkdir()
    Image.fromarray(fixture_image()).resize((640, 512)).save(images / "a_big.png")  # 327,680 bytes a mask
    Image.fromarray(fixture_image()).resize((80, 64)).save(images / "b_small.png")  # 5,120 bytes a mask
    monkeypatch.chdir(tmp_path)
    assert main([str(seg), "images", *FAST, "--retina-masks", "--save-txt", "--out", "out"]) == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: images/a_big.png: ")
    assert "masks at the image's size 640x512" in errors[0] and errors[0].endswith("(no --retina-masks)")
    assert (tmp_path / "out" / "b_small.png").exists() and not (tmp_path / "out" / "a_big.png").exists()


def test_segment_everything_upsamples_a_bounded_number_of_masks_at_a_time(tmp_path):
    """All of a batch's candidates were upsampled to the photo's size at once (192 at 8000x8000: 4.2 GB);
    with room for two masks at a time, 48 candidates on a 1000x1500 photo raise a child's peak RSS by
    less than 12 full-size float32 maps (two masks at 20 bytes a pixel, and headroom): 230 maps before."""
    h, w = 1000, 1500
    child = PEAK_RSS_KB + f"""
import dataclasses
import numpy as np
from zoo import registry
from zoo.models.mobilesam import automatic_mask_generator as generator
generator.UPSAMPLE_BYTES = 2 * {h * w} * generator.UPSAMPLED_BYTES_PER_PIXEL
spec = dataclasses.replace(registry.get_spec("mobilesam"), preprocess={{"image_size": 128}})
sam = registry.build(spec, registry.read_weights(spec, "synthetic:0"))
masks = sam.mask_generator(points_per_side=4, points_per_batch=16, pred_iou_thresh=0, stability_score_thresh=0,
                           output_mode="uncompressed_rle")
rng = np.random.default_rng(0)
masks.generate(rng.integers(0, 256, (100, 150, 3), dtype=np.uint8))  # everything loaded and compiled
photo = rng.integers(0, 256, ({h}, {w}, 3), dtype=np.uint8)
before = peak_rss_kb()
records = masks.generate(photo)
print(len(records), before, peak_rss_kb())
"""
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    count, before, after = map(int, done.stdout.split())
    assert count > 0
    assert (after - before) * 1024 < 12 * h * w * 4


def test_drawing_masks_scales_them_to_the_image_a_band_at_a_time():
    """plot() of masks at the model's input size stacked every mask at the image's size first: a default
    yolo11n-seg run on an 8000x8000 photo (67 masks) peaked at 9.8 GB to draw them. Retina masks given as
    bool are held once (their uint8 copy doubled them)."""
    import tracemalloc

    from zoo.results import Masks, Results

    h, w, count = 1500, 2000, 60  # each mask at the image's size: 3 MB; all of them 180 MB
    data = np.zeros((count, 120, 160), np.uint8)
    for i in range(count):
        data[i, i:i + 40, i:i + 60] = 1
    boxes = np.array([[i * 12.5, i * 12.5, i * 12.5 + 750, i * 12.5 + 750, 0.9, 0] for i in range(count)], np.float32)
    result = Results(np.zeros((h, w, 3), np.uint8), "big.png", {0: "person"}, boxes=boxes, masks=data)
    tracemalloc.start()
    try:
        drawn = result.plot(boxes=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert drawn.shape == (h, w, 3) and drawn.any()
    assert peak < 20 * h * w * 3, peak  # the image's copies and a band's float32 rows, not 60 masks' 180 MB
    retina = np.zeros((3, h, w), bool)
    assert np.shares_memory(Masks(retina, (h, w)).data, retina)
