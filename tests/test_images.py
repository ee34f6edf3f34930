"""Image input: every Pillow mode becomes RGB uint8, EXIF orientation applied, bad files named."""
import numpy as np
import pytest
from PIL import Image

from zoo.errors import ZooError
from zoo.images import center_crop, image_files, load_image, resize_shorter_side


@pytest.mark.parametrize("mode", ["L", "LA", "P", "RGBA", "CMYK", "I;16", "I", "F", "1"])
def test_modes_become_rgb(tmp_path, mode):
    img = Image.new("RGB", (7, 5), (200, 100, 50))
    img = (img.convert("L") if mode == "I;16" else img).convert(mode)  # Pillow 10.1 makes I;16 only from greyscale
    path = tmp_path / ("x.tiff" if mode in ("I;16", "I", "F", "CMYK") else "x.png")
    img.save(path)
    a = load_image(path)
    assert a.shape == (5, 7, 3) and a.dtype == np.uint8


def test_sixteen_bit_scaled_not_clipped(tmp_path):
    Image.fromarray(np.full((4, 4), 65535, np.uint16)).save(tmp_path / "w.png")
    assert load_image(tmp_path / "w.png").min() == 255


def test_transparent_pixels_become_white(tmp_path):
    Image.new("RGBA", (3, 3), (10, 20, 30, 0)).save(tmp_path / "t.png")
    assert (load_image(tmp_path / "t.png") == 255).all()


def test_exif_orientation_applied(tmp_path):
    img = Image.new("RGB", (6, 4), (0, 0, 0))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise on display
    img.save(tmp_path / "o.jpg", exif=exif)
    assert load_image(tmp_path / "o.jpg").shape == (6, 4, 3)


def test_an_animation_says_its_first_frame_is_used(tmp_path, capsys):
    frames = [Image.new("RGB", (8, 6), (40 * i, 0, 0)) for i in range(3)]
    frames[0].save(tmp_path / "a.gif", save_all=True, append_images=frames[1:])
    assert load_image(tmp_path / "a.gif")[0, 0, 0] == 0  # the first frame, as Pillow (and IOPaint) decode it
    assert f"note: {tmp_path / 'a.gif'} holds 3 frames" in capsys.readouterr().err
    frames[1].save(tmp_path / "still.gif")
    load_image(tmp_path / "still.gif")
    assert capsys.readouterr().err == ""


def test_truncated_file(tmp_path):
    Image.new("RGB", (64, 64), (1, 2, 3)).save(tmp_path / "full.png")
    data = (tmp_path / "full.png").read_bytes()
    (tmp_path / "cut.png").write_bytes(data[: len(data) // 2])
    with pytest.raises(ZooError, match="cut.png.*(damaged|truncated|not an image)"):
        load_image(tmp_path / "cut.png")


def test_empty_file_and_directory(tmp_path):
    (tmp_path / "empty.jpg").write_bytes(b"")
    with pytest.raises(ZooError, match="empty.jpg"):
        load_image(tmp_path / "empty.jpg")
    with pytest.raises(ZooError, match="is a directory"):
        load_image(tmp_path)
    (tmp_path / "sub").mkdir()
    with pytest.raises(ZooError, match="no images in directory"):
        image_files(tmp_path / "sub")


def test_arrays():
    assert load_image(np.zeros((2, 3), np.uint8)).shape == (2, 3, 3)
    assert load_image(np.ones((2, 3, 4), np.float32))[0, 0, 0] == 255
    with pytest.raises(ZooError, match="outside \\[0, 1\\]"):
        load_image(np.full((2, 2, 3), 7.0))
    with pytest.raises(ZooError, match="shape"):
        load_image(np.zeros((2, 2, 5), np.uint8))


@pytest.mark.parametrize("value,kind", [(np.nan, "NaN"), (np.inf, "infinite"), (-np.inf, "infinite")])
def test_floats_that_are_not_numbers_are_refused(tmp_path, value, kind):
    """A float image with a NaN (a depth map's no-data, a division by zero) was cast to arbitrary pixels and
    classified without a word: NaN passed the [0, 1] check. An array or a float TIFF (mode F) is refused."""
    a = np.full((4, 5), 0.5, np.float32)
    a[1, 2] = value
    with pytest.raises(ZooError, match=f"^image holds {kind} values: replace them"):
        load_image(np.repeat(a[:, :, None], 3, axis=2))
    Image.fromarray(a, "F").save(tmp_path / "depth.tif")
    with pytest.raises(ZooError, match=f"depth.tif holds {kind} values"):
        load_image(tmp_path / "depth.tif")


def test_resize_and_crop_follow_torchvision():
    img = np.zeros((300, 451, 3), np.uint8)
    resized = resize_shorter_side(img, 256)
    assert resized.shape == (256, int(256 * 451 / 300), 3)
    assert center_crop(resized, 224).shape == (224, 224, 3)
    with pytest.raises(ZooError, match="smaller than"):
        center_crop(np.zeros((10, 10, 3), np.uint8), 224)


@pytest.mark.parametrize("read", [load_image, image_files])
def test_a_url_is_named_as_a_url(read):
    """A URL where a file is read: Path made it 'image not found: https:/host/bus.jpg' (one slash)."""
    with pytest.raises(ZooError, match="^https://host/bus.jpg is a URL: images are read from files here; download "
                                       "it and pass the file$"):
        read("https://host/bus.jpg")
