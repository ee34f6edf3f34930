"""ultralytics-shaped Results and Boxes: the accessors agree with each other and with the saved label file,
plot() and save() draw the same boxes, crops, numpy input is BGR, nothing existing is replaced."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest
from PIL import Image

import zoo
from zoo.errors import ZooError, command_line
from zoo.results import Boxes, Results, class_colour

NAMES = {0: "cat", 1: "dog", 2: "traffic cone"}
DATA = np.array([[10.5, 20, 50, 80, 0.9, 0], [0, 0, 30, 31, 0.8, 2], [60, 5, 119, 99, 0.5, 0]], np.float32)


@pytest.fixture
def result():
    image = np.random.default_rng(0).integers(0, 200, (100, 120, 3), np.uint8)  # BGR, darker than the colours
    return Results(image, "photo.jpg", NAMES, DATA)


def test_box_accessors_agree(result):
    b = result.boxes
    h, w = result.orig_shape
    assert (h, w) == (100, 120) and len(b) == 3 and b.shape == (3, 6) and np.array_equal(b.data, DATA)
    assert np.array_equal(b.xyxy, DATA[:, :4]) and np.array_equal(b.conf, DATA[:, 4]) and np.array_equal(b.cls, DATA[:, 5])
    x1, y1, x2, y2 = b.xyxy.T
    assert np.allclose(b.xywh, np.stack([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1], 1))
    assert np.allclose(b.xywhn, b.xywh / [w, h, w, h]) and np.allclose(b.xyxyn, b.xyxy / [w, h, w, h])
    # xywhn converted back is xyxy
    xc, yc, bw, bh = (b.xywhn * [w, h, w, h]).T
    assert np.allclose(np.stack([xc - bw / 2, yc - bh / 2, xc + bw / 2, yc + bh / 2], 1), b.xyxy, atol=1e-4)
    # iteration and indexing give Boxes of the rows
    rows = list(b)
    assert [len(r) for r in rows] == [1, 1, 1] and np.array_equal(rows[1].data[0], DATA[1])
    assert int(b[2].cls[0]) == 0 and len(b[1:]) == 2 and len(b[b.conf > 0.6]) == 2 and len(b[[0, 2]]) == 2
    assert len(result[b.cls == 0]) == 2 and result[0].boxes.conf.tolist() == pytest.approx([0.9])


def test_label_file_holds_the_accessors_values(result, tmp_path):
    path = result.save_txt(tmp_path / "labels" / "photo.txt", save_conf=True)
    rows = np.loadtxt(path, ndmin=2)
    assert rows.shape == (3, 6)
    assert np.array_equal(rows[:, 0], result.boxes.cls)
    assert np.allclose(rows[:, 1:5], result.boxes.xywhn, rtol=1e-5, atol=1e-6)  # %g: 6 significant digits
    assert np.allclose(rows[:, 5], result.boxes.conf, rtol=1e-5)
    assert np.loadtxt(result.save_txt(tmp_path / "plain.txt"), ndmin=2).shape == (3, 5)
    # as ultralytics, a second call appends (a video's frames into one file); overwrite=True replaces, False refuses
    assert np.loadtxt(result.save_txt(tmp_path / "plain.txt"), ndmin=2).shape == (6, 5)
    with pytest.raises(ZooError, match=r"plain.txt exists: pass overwrite=True"):
        result.save_txt(tmp_path / "plain.txt", overwrite=False)
    assert np.loadtxt(result.save_txt(tmp_path / "plain.txt", save_conf=True, overwrite=True), ndmin=2).shape == (3, 6)
    assert not (tmp_path / "none.txt").exists() and result.new().save_txt(tmp_path / "none.txt")  # no boxes, no file
    assert not (tmp_path / "none.txt").exists()
    # the command line's run writes labels through the same call: its refusal names the flag, not the keyword
    with command_line(), pytest.raises(ZooError, match=r"plain.txt exists: pass --overwrite to replace it"):
        result.save_txt(tmp_path / "plain.txt", overwrite=False)


def test_save_txt_appends_after_a_last_line_without_its_newline(result, tmp_path):
    """A label file written by hand or another tool, its last line without a newline: save_txt's first line was
    glued to it ('0 0.5 0.5 0.1 0.10 0.25 ...'), one box of seven values and one lost."""
    labels = tmp_path / "labels.txt"
    labels.write_text("3 0.5 0.5 0.1 0.1")
    result.save_txt(labels)
    lines = labels.read_text().splitlines()
    assert lines == ["3 0.5 0.5 0.1 0.1", *result.label_lines(False)] and all(len(x.split()) == 5 for x in lines)


def test_plot_and_save_draw_the_same_boxes(result, tmp_path):
    plotted = result.plot()
    assert plotted.shape == (100, 120, 3) and plotted.dtype == np.uint8
    saved = result.save(tmp_path / "annotated.png")
    with Image.open(saved) as im:
        assert np.array_equal(np.asarray(im)[..., ::-1], plotted)  # the file is RGB, plot() BGR
    # each box's left edge is drawn in its class's colour (BGR in plot())
    for (x1, y1, x2, y2, _, cls) in DATA.tolist():
        colour = class_colour(int(cls))[::-1]
        column = plotted[int(y2) - 3, int(x1) + 1] if x1 > 0 else plotted[int(y2) - 3, 1]
        assert tuple(column) == colour, (x1, cls, column)
    bare = result.plot(labels=False, boxes=False)
    assert np.array_equal(bare, result.orig_img)
    assert not np.array_equal(result.plot(line_width=5), plotted) and not np.array_equal(result.plot(conf=False), plotted)
    assert result.plot(pil=True).size == (120, 100)
    # the file named is replaced, as ultralytics does; overwrite=False refuses it
    assert result.save(tmp_path / "annotated.png", conf=False)
    with Image.open(tmp_path / "annotated.png") as im:
        assert np.array_equal(np.asarray(im)[..., ::-1], result.plot(conf=False))
    with pytest.raises(ZooError, match="annotated.png exists"):
        result.save(tmp_path / "annotated.png", overwrite=False)


def test_save_crop_writes_each_box_per_class_without_replacing(result, tmp_path):
    written = result.save_crop(tmp_path / "crops", file_name="photo.jpg")
    assert sorted(p.split("crops/")[1] for p in written) == ["cat/photo.jpg", "cat/photo2.jpg", "traffic cone/photo.jpg"]
    crops = result.crops()
    # save_one_box: the box's width and height times 1.02 plus 10 px, clipped to the image
    # box 0: centre (30.25, 50), size 39.5 x 60 -> 50.29 x 71.2 -> x 5.105..55.395, y 14.4..85.6, truncated
    assert np.array_equal(crops[0], result.orig_img[14:85, 5:55])
    with Image.open(tmp_path / "crops" / "cat" / "photo.jpg") as im:
        assert im.size == crops[0].shape[1::-1]
    again = result.save_crop(tmp_path / "crops", file_name="photo.jpg")
    assert "cat/photo3.jpg" in again[0] and len(list((tmp_path / "crops").rglob("*.jpg"))) == 6
    # a file_name with folders keeps them, as ultralytics' save_one_box (save_dir/class/file_name, .jpg)
    nested = result.save_crop(tmp_path / "crops", file_name="clip/frame_1.png")
    assert sorted(p.split("crops/")[1] for p in nested) == ["cat/clip/frame_1.jpg", "cat/clip/frame_12.jpg",
                                                             "traffic cone/clip/frame_1.jpg"]


def test_save_crop_into_a_file_is_one_error(result, tmp_path):
    """save_crop(save_dir) where save_dir, or a class folder in it, is a file: a one-line ZooError naming it; it
    was a NotADirectoryError traceback from mkdir. Nothing is written."""
    (tmp_path / "notes.jpg").write_bytes(b"mine")
    with pytest.raises(ZooError, match=r"^crop .*notes.jpg/cat/photo.jpg: its folder .*notes.jpg/cat cannot be "
                                       r"created: .*notes.jpg is a file: pass a folder path$"):
        result.save_crop(tmp_path / "notes.jpg", file_name="photo.jpg")
    (tmp_path / "crops").mkdir()
    (tmp_path / "crops" / "cat").write_bytes(b"mine")
    with pytest.raises(ZooError, match=r"cat cannot be created: .*crops/cat is a file: pass a folder path$"):
        result.save_crop(tmp_path / "crops", file_name="photo.jpg")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["cat", "crops", "notes.jpg"]
    assert (tmp_path / "notes.jpg").read_bytes() == (tmp_path / "crops" / "cat").read_bytes() == b"mine"


def test_save_crop_keeps_class_names_of_a_checkpoint_inside_save_dir(tmp_path):
    """A checkpoint's class names become crop folders: ``../../x`` wrote crops outside save_dir, ``a/b`` nested
    folders, ``..`` and an empty name the crops' own parent. Each is now one folder in save_dir."""
    image = np.zeros((100, 120, 3), np.uint8)
    names = {0: "../../escaped", 1: "", 2: "..", 3: "cat/dog"}
    boxes = np.array([[10, 10, 50, 50, 0.9, c] for c in names], np.float32)
    written = Results(image, "photo.jpg", names, boxes).save_crop(tmp_path / "run" / "crops", file_name="f.jpg")
    assert sorted(p.split("crops/")[1] for p in written) == [".._.._escaped/f.jpg", "cat_dog/f.jpg",
                                                             "class1/f.jpg", "class2/f.jpg"]
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.jpg")) == [
        f"run/crops/{name}/f.jpg" for name in (".._.._escaped", "cat_dog", "class1", "class2")]


def test_summary_and_json_use_ultralytics_keys(result):
    rows = json.loads(result.to_json())
    assert rows[1] == {"name": "traffic cone", "class": 2, "confidence": 0.8,
                       "box": {"x1": 0.0, "y1": 0.0, "x2": 30.0, "y2": 31.0}}
    assert result.summary(normalize=True)[1]["box"] == {"x1": 0.0, "y1": 0.0, "x2": 0.25, "y2": 0.31}
    assert result.verbose() == "2 cats, 1 traffic cone, "


def strict_json(text: str):
    """``text`` read as JSON readers outside Python read it: NaN and Infinity are not JSON."""
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")
    return json.loads(text, parse_constant=refuse)


def test_to_json_writes_a_nan_or_infinite_value_as_null():
    """A hand-built Results with a NaN score (or an infinite box) gave to_json() text with NaN (json.dumps's, as
    ultralytics'), which no JSON reader but Python's takes. Now valid JSON: null; finite values unchanged."""
    data = DATA.copy()
    data[0, 4], data[1, 2] = np.nan, np.inf
    rows = strict_json(Results(np.zeros((100, 120, 3), np.uint8), "photo.jpg", NAMES, data).to_json())
    assert rows[0]["confidence"] is None and rows[1]["box"]["x2"] is None
    assert rows[0]["box"] == {"x1": 10.5, "y1": 20.0, "x2": 50.0, "y2": 80.0} and rows[2]["confidence"] == 0.5


def test_to_json_is_ultralytics_text_for_non_ascii_names_and_small_numbers():
    """ultralytics' to_json() (polars' write_json) writes a class named "café" as it is, and 0.00001 for a number
    Python writes 1e-05 (6e-6 for 6e-06): ours escaped the name ("caf\\u00e9") and wrote Python's numbers. The same
    values to a JSON reader, but grep for the name, or a diff against upstream's text (a pose model's keypoint
    visibilities are such numbers), found them apart. The texts expected are upstream's, ultralytics 8.3.253's
    to_df().write_json() on these rows (polars 2.1.0, 2026-11-30). A lone surrogate (a name's bytes that are not
    UTF-8) is escaped as json.dumps escapes it, so the text stays UTF-8."""
    data = np.array([[10.5, 20, 50, 80, 0.9, 0], [60, 5, 119, 99, 0.5, 1], [0.0012, 0.0006, 30, 31, 0.00003, 2]],
                    np.float32)
    result = Results(np.zeros((100, 120, 3), np.uint8), "photo.jpg", {0: "café", 1: "狗", 2: "traffic cone"}, data)
    rows = ('[{"name":"café","class":0,"confidence":0.9,"box":{"x1":0.0875,"y1":0.2,"x2":%s,"y2":0.8}},'
            '{"name":"狗","class":1,"confidence":0.5,"box":{"x1":0.5,"y1":0.05,"x2":%s,"y2":0.99}},'
            '{"name":"traffic cone","class":2,"confidence":0.00003,"box":{"x1":0.00001,"y1":%s,"x2":0.25,"y2":0.31}}]')
    assert result.to_json(normalize=True) == rows % ("0.41667", "0.99167", "0.00001")
    assert result.to_json(normalize=True, decimals=7) == rows % ("0.4166667", "0.9916667", "6e-6")
    text = Results(np.zeros((100, 120, 3), np.uint8), "photo.jpg", {0: "caf\udce9 1e-05"}, data[:1]).to_json()
    assert '"name":"caf\\udce9 1e-05"' in text and json.loads(text.encode("utf-8"))[0]["name"] == "caf\udce9 1e-05"


def test_bad_box_data_is_one_line():
    with pytest.raises(ZooError, match=r"boxes have shape \(2, 4\): expected \(N, 6\)"):
        Boxes(np.zeros((2, 4)), (10, 10))


def test_numpy_input_is_bgr_and_pil_rgb():
    det = zoo.load("yolov8n", weights="synthetic:0", device="cpu")
    rgb = np.random.default_rng(3).integers(0, 256, (48, 64, 3), np.uint8)
    from_pil, from_bgr, from_rgb = det.predict([Image.fromarray(rgb), rgb[..., ::-1].copy(), rgb],
                                               conf=0.05, imgsz=64, batch=1)
    assert np.array_equal(from_pil.orig_img, rgb[..., ::-1]) and np.array_equal(from_bgr.orig_img, rgb[..., ::-1])
    assert len(from_pil) and np.array_equal(from_pil.boxes.data, from_bgr.boxes.data)
    assert not np.array_equal(from_pil.boxes.data, from_rgb.boxes.data)  # the same array read as RGB differs


@pytest.mark.parametrize("call, message", [
    (lambda r: r.save_crop(""), "save_dir='' is empty (an unset variable?): pass a folder"),
    (lambda r: r.save_crop("crops", file_name=""), "file_name='' is empty (an unset variable?): pass a file name"),
    (lambda r: r.save_txt(""), "txt_file='' is empty (an unset variable?): pass a file path"),
])
def test_an_empty_save_path_is_one_error(result, tmp_path, monkeypatch, call, message):
    """An empty path is the current folder: save_crop('') wrote the crops into ./<class>/ without a word,
    file_name='' was a ValueError traceback; as predict(project='') and the CLI's empty arguments (E55)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ZooError, match=f"^{re.escape(message)}$"):
        call(result)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("method", ["to_csv", "to_json", "to_df", "summary"])
def test_a_file_name_given_to_the_text_forms_is_refused(result, tmp_path, method):
    """``r.to_csv("out.csv")`` (pandas' to_csv takes the file first) took the name as ``normalize``: it returned
    normalized boxes and wrote no file, without a word. Now one ZooError naming how to write the file."""
    with pytest.raises(ZooError, match=r"normalize takes True or False, not '.*out\.csv': .* write no file: "
                                       r"Path\('.*out\.csv'\)\.write_text\(r\.to_csv\(\)\)"):
        getattr(result, method)(tmp_path / "out.csv")
    with pytest.raises(ZooError, match="not 'out.csv'"):
        getattr(result, method)("out.csv")
    assert not list(tmp_path.iterdir()) and result.to_csv(True) == result.to_csv(normalize=1)


def test_to_coco_ids_are_json_integers(result):
    """A numpy image id (a COCO ground truth's ids read into an array) or numpy category ids gave records that
    json.dump refused ('Object of type int64 is not JSON serializable'); a string or float id gave records that
    pycocotools' loadRes matches to no image. Now numpy integers are Python ints, other ids one ZooError each."""
    records = result.to_coco(np.int64(42), np.array([1, 5, 9]))
    assert json.loads(json.dumps(records)) == records
    assert [(r["image_id"], r["category_id"]) for r in records] == [(42, 1), (42, 9), (42, 1)]
    assert all(type(r["image_id"]) is int and type(r["category_id"]) is int for r in records)
    for image_id in ("42", 42.0, True):
        with pytest.raises(ZooError, match=rf"image_id takes integers \(COCO's ids\), not {image_id!r}"):
            result.to_coco(image_id)
    with pytest.raises(ZooError, match="category_ids gives 2 ids for the model's 3 classes"):
        result.to_coco(1, [1, 2])
