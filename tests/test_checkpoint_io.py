"""Checkpoint reading without torch: real torch.save files, hostile pickles, safetensors."""
from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

from torch_writer import Call, Glob, New, Reduced, module, tensor, write_torch_zip
from zoo.errors import ZooError
from zoo.weights.checkpoint import read_checkpoint, read_checkpoint_with_meta
from zoo.weights.torchfile import (StubObject, UnsafeCheckpointError, load_torch_file,
                                   module_attribute, state_dict_from)

FIXTURES = Path(__file__).parent / "fixtures" / "torchfiles"
EXPECTED = dict(np.load(FIXTURES / "state_dict_expected.npz"))  # bf16 stored as float32
MARKER = Path("/tmp/zoo_pickle_was_executed")


def assert_same(actual: dict, expected: dict):
    assert list(actual) == list(expected)
    for name, want in expected.items():
        got = actual[name]
        assert (got.dtype, got.shape) == (want.dtype, want.shape), name
        np.testing.assert_array_equal(got, want, err_msg=name)


# --- real files written by torch 2.13 ---------------------------------------------------------


@pytest.mark.parametrize("name", ["state_dict_zip.pt", "state_dict_legacy.pt", "nested_zip.pth"])
def test_torch_files_match_expected(name):
    assert_same(read_checkpoint(FIXTURES / name), EXPECTED)


def test_bf16_is_widened_to_float32_exactly():
    weights = read_checkpoint(FIXTURES / "state_dict_zip.pt")
    assert weights["bf16"].dtype == np.float32
    assert not (weights["bf16"].view(np.uint32) & 0xFFFF).any()  # only bfloat16's bits are set


def test_nested_file_metadata():
    _, meta = read_checkpoint_with_meta(FIXTURES / "nested_zip.pth")
    assert meta == {"meta": {"epoch": 3, "names": ["a", "b"], "lr": 0.01, "flag": True, "t": (1, 2)}}


def test_lightning_checkpoint_stubs_classes_without_importing_them():
    tree = load_torch_file(FIXTURES / "lightning_like.ckpt")
    weights = state_dict_from(tree)
    prefix = "generator.model."
    assert all(name.startswith(prefix) for name in weights)
    assert_same(weights, {prefix + k: v for k, v in EXPECTED.items() if prefix + k in weights})
    assert len(weights) == 11

    (callback, state), = tree["callbacks"].items()
    assert "ModelCheckpoint" in repr(callback) and state["monitor"] == "val_loss"
    config = tree["hyper_parameters"]["config"]
    assert isinstance(config, StubObject)
    assert type(config).stub_qualname == "omegaconf.dictconfig.DictConfig"
    assert set(config._content) == {"generator", "losses"}
    assert not {"torch", "omegaconf", "pytorch_lightning"} & set(sys.modules)

    _, meta = read_checkpoint_with_meta(FIXTURES / "lightning_like.ckpt")
    assert meta == {"epoch": 39, "global_step": 1000, "pytorch-lightning_version": "1.2.9"}


@pytest.mark.parametrize("name, culprit", [("hostile.pt", "posix.system"),
                                           ("hostile_eval.pth", "builtins.eval")])
def test_hostile_files_are_refused_before_running(name, culprit):
    MARKER.unlink(missing_ok=True)
    with pytest.raises(UnsafeCheckpointError) as refusal:
        read_checkpoint(FIXTURES / name)
    message = str(refusal.value)
    assert name in message and culprit in message and "nothing was executed" in message
    assert "\n" not in message
    assert not MARKER.exists()


# --- crafted pickles (see torch_writer.py) ------------------------------------------------


def detector() -> New:
    conv = module("torch.nn.modules.conv.Conv2d", {"weight": tensor([[1, 2], [3, 4]]), "bias": None})
    bn = module("torch.nn.modules.batchnorm.BatchNorm2d", {"weight": tensor([5, 6])},
                {"running_mean": tensor([7, 8]), "scratch": tensor([9])}, non_persistent={"scratch"})
    block = module("mypkg.nets.Block", children={"conv": conv, "bn": bn})
    return module("mypkg.nets.Detector", children={"block": block, "act": module("torch.nn.SiLU")},
                  names={0: "cat", 1: "dog"})


DETECTOR_WEIGHTS = {"block.conv.weight": np.float32([[1, 2], [3, 4]]),
                    "block.bn.weight": np.float32([5, 6]), "block.bn.running_mean": np.float32([7, 8])}


def test_module_tree_walk_skips_none_parameters_and_non_persistent_buffers(tmp_path):
    path = write_torch_zip(tmp_path / "detector.pt", {"model": detector(), "epoch": -1})
    assert_same(read_checkpoint(path), DETECTOR_WEIGHTS)
    assert module_attribute(load_torch_file(path), "names") == {0: "cat", 1: "dog"}
    assert read_checkpoint_with_meta(path)[1] == {
        "epoch": -1, "names": {0: "cat", 1: "dog"}, "module_class": "mypkg.nets.Detector",
        "module_attributes": {"training": False, "names": {0: "cat", 1: "dog"}}}


def test_module_attributes_read_namespaces_as_dicts_and_drop_the_rest(tmp_path):
    """ultralytics' last.pt: model.args is an IterableSimpleNamespace (plain state: read as a dict)."""
    args = New(Glob("ultralytics.utils", "IterableSimpleNamespace"), {"task": "detect", "imgsz": 320})
    model = module("ultralytics.nn.tasks.DetectionModel", {"w": tensor([1])}, args=args, criterion=module("mypkg.Loss"),
                   stride=tensor([8, 16, 32]), yaml={"nc": 2, "scale": "n"})
    meta = read_checkpoint_with_meta(write_torch_zip(tmp_path / "last.pt", {"model": None, "ema": model}))[1]
    assert meta["module_class"] == "ultralytics.nn.tasks.DetectionModel"
    assert meta["module_attributes"] == {"training": False, "args": {"task": "detect", "imgsz": 320},
                                         "yaml": {"nc": 2, "scale": "n"}}


def test_namespaces_pickled_by_their_own_reduce_read_as_dicts(tmp_path):
    """types.SimpleNamespace pickles itself as (cls, (), state): REDUCE of the class with no arguments, then BUILD.
    ultralytics' IterableSimpleNamespace does so in the train_args and model.args of every last.pt of a run not
    finished (before: refused as a call of ultralytics.utils.IterableSimpleNamespace)."""
    args = Reduced(Glob("ultralytics.utils", "IterableSimpleNamespace"), {"task": "detect", "imgsz": 320})
    model = module("ultralytics.nn.tasks.DetectionModel", {"w": tensor([1])}, args=args)
    path = write_torch_zip(tmp_path / "last.pt", {"model": None, "ema": model, "train_args": args})
    meta = read_checkpoint_with_meta(path)[1]
    assert meta["train_args"] == meta["module_attributes"]["args"] == {"task": "detect", "imgsz": 320}
    assert "ultralytics" not in sys.modules
    plain = Reduced(Glob("types", "SimpleNamespace"), {"model": "resnet50", "lr": 0.1})  # 'types' is otherwise refused
    path = write_torch_zip(tmp_path / "train.pth", {"state_dict": {"w": tensor([1])}, "args": plain})
    assert read_checkpoint_with_meta(path)[1]["args"] == {"model": "resnet50", "lr": 0.1}


def test_torchscript_archives_give_their_modules_tensors(tmp_path):
    """torch.jit.save pickles each module as a __torch__.<class> object holding all its attributes at once, and a
    scripted one's int lists through torch.jit._pickle.build_intlist (before: 'no weights found', and refused)."""
    conv = New(Glob("__torch__.torch.nn.modules.conv", "Conv2d"), {
        "training": False, "weight": tensor(np.ones((2, 3, 1, 1))), "bias": tensor([0.5, -1]),
        "_reversed_padding_repeated_twice": Call(Glob("torch.jit._pickle", "build_intlist"), ([0, 0, 0, 0],))})
    net = New(Glob("__torch__.___torch_mangle_10", "Net"), {
        "training": False, "conv1": conv, "layer": New(Glob("__torch__.torch.nn.modules.container", "Sequential"), {
            "0": New(Glob("__torch__.torch.nn.modules.conv", "Conv2d"), {"weight": tensor(np.zeros((2, 2, 1, 1)))})}),
        "options": Call(Glob("torch.jit._pickle", "restore_type_tag"), ({"mode": 1}, "Dict[str, int]"))})
    path = write_torch_zip(tmp_path / "traced.pt", net,
                           records={"code/__torch__.py": b"", "constants.pkl": b"\x80\x02)."})
    weights, meta = read_checkpoint_with_meta(path)
    assert_same(weights, {"conv1.weight": np.ones((2, 3, 1, 1), np.float32), "conv1.bias": np.float32([0.5, -1]),
                          "layer.0.weight": np.zeros((2, 2, 1, 1), np.float32)})
    assert meta["module_class"] == "__torch__.___torch_mangle_10.Net"


def test_weight_keys_preference(tmp_path):
    flat = {"w": tensor([1.0])}
    cases = {"ema_fallback.pt": ({"model": None, "ema": detector()}, DETECTOR_WEIGHTS),
             "state_dict_first.pt": ({"model": detector(), "state_dict": flat}, {"w": np.float32([1])}),
             "bare_module.pt": (detector(), DETECTOR_WEIGHTS)}
    for name, (obj, expected) in cases.items():
        assert_same(read_checkpoint(write_torch_zip(tmp_path / name, obj)), expected)


def test_ultralytics_8_0_checkpoints_load_their_ema_as_ultralytics(tmp_path, capsys):
    """ultralytics 8.0's trainer saved both 'model' and 'ema' (until the end of training strips them), and its
    load_checkpoint takes ckpt.get("ema") or ckpt["model"]: the EMA, with a note (before: the plain weights,
    silently)."""
    plain = module("ultralytics.nn.tasks.DetectionModel", {"w": tensor([1.0])})
    averaged = module("ultralytics.nn.tasks.DetectionModel", {"w": tensor([2.0])})
    path = write_torch_zip(tmp_path / "best.pt", {"epoch": -1, "model": plain, "ema": averaged})
    assert_same(read_checkpoint(path), {"w": np.float32([2])})
    assert "its EMA weights (ema) are loaded, as ultralytics' load_checkpoint does" in capsys.readouterr().err
    # the current trainer's files: model None, the EMA the only weights, nothing to say
    assert_same(read_checkpoint(write_torch_zip(tmp_path / "last.pt", {"model": None, "ema": averaged})),
                {"w": np.float32([2])})
    assert capsys.readouterr().err == ""


def test_timm_training_checkpoints_load_as_timm_loads_them(tmp_path, capsys):
    """timm's train.py writes model_best.pth.tar / checkpoint-N.pth.tar ({'state_dict', 'state_dict_ema' with
    --model-ema, 'optimizer', 'args': a Namespace}); timm's load_checkpoint takes the EMA by default and drops
    DataParallel's 'module.' prefix. Before: '.tar' was an unknown format, and renamed to .pth the plain weights
    loaded where timm's gave the EMA's."""
    from zoo.registry import is_weights_file

    args = New(Glob("argparse", "Namespace"), {"model": "resnet18", "model_ema": True})
    checkpoint = {"epoch": 3, "arch": "resnet18", "state_dict": {"module.w": tensor([1.0])},
                  "state_dict_ema": {"module.w": tensor([2.0])}, "optimizer": {"state": {}}, "args": args}
    path = write_torch_zip(tmp_path / "model_best.pth.tar", checkpoint)
    assert is_weights_file(path) and not is_weights_file("model_best.tar")
    assert_same(read_checkpoint(path), {"w": np.float32([2])})  # the EMA, unprefixed
    assert "its EMA weights (state_dict_ema) are loaded" in capsys.readouterr().err
    del checkpoint["state_dict_ema"]  # without --model-ema: the weights, and no note
    assert_same(read_checkpoint(write_torch_zip(tmp_path / "checkpoint-3.pth.tar", checkpoint)), {"w": np.float32([1])})
    assert capsys.readouterr().err == ""
    with pytest.raises(ZooError, match="unknown weights format .tar"):
        read_checkpoint(write_torch_zip(tmp_path / "model_best.tar", checkpoint))


def test_big_endian_storages_are_byteswapped(tmp_path):
    path = write_torch_zip(tmp_path / "big.pt", {"w": tensor([[1.5, -2], [3, 4]])}, big_endian=True)
    assert_same(read_checkpoint(path), {"w": np.float32([[1.5, -2], [3, 4]])})


def test_newobj_of_unknown_class_is_stubbed(tmp_path):
    path = write_torch_zip(tmp_path / "stub.pt", New(Glob("mypkg.models", "Net"), {"layers": 3}))
    net = load_torch_file(path)
    assert isinstance(net, StubObject) and net.layers == 3 and net.stub_state == {"layers": 3}
    assert repr(net) == "<stub mypkg.models.Net>"
    assert "mypkg" not in sys.modules


@pytest.mark.parametrize("payload, culprit", [
    (lambda marker: Call(Glob("os", "system"), (f"touch {marker}",)), "os.system"),
    (lambda marker: Call(Glob("__builtin__", "exec"), (f"open('{marker}', 'w')",)), "builtins.exec"),
    (lambda marker: Call(Call(Glob("builtins", "getattr"), (Glob("pathlib", "Path"), "touch")), (marker,)),
     "builtins.getattr"),
    (lambda marker: Call(Glob("subprocess", "check_call"), (["touch", str(marker)],)), "subprocess.check_call"),
    (lambda marker: Call(Glob("importlib", "import_module"), ("os",)), "importlib.import_module"),
    (lambda marker: Call(Glob("mypkg.tools", "run"), (f"touch {marker}",)), "calls mypkg.tools.run"),
    (lambda marker: Call(Glob("copyreg", "_reconstructor"),
                         (Glob("collections", "OrderedDict"), Glob("builtins", "object"), None)),
     "creates OrderedDict"),
], ids=["os.system", "exec", "getattr", "subprocess", "importlib", "unknown-function", "reconstructor"])
def test_crafted_calls_are_refused(tmp_path, payload, culprit):
    marker = tmp_path / "executed"
    path = write_torch_zip(tmp_path / "crafted.pt", {"weight": tensor([1.0]), "payload": payload(str(marker))})
    with pytest.raises(UnsafeCheckpointError, match=culprit):
        load_torch_file(path)
    assert not marker.exists()


@pytest.mark.parametrize("data", [
    b"(S'touch x'\nios\nsystem\n.",  # protocol 0 INST of a forbidden global
    b"(S'x'\nimypkg.tools\nrun\n.",  # INST with arguments calls the class
], ids=["inst-forbidden", "inst-stub"])
def test_protocol_0_instantiation_is_refused(tmp_path, data):
    with pytest.raises(UnsafeCheckpointError):
        load_torch_file(write_torch_zip(tmp_path / "old.pt", data=data))


def test_tensor_outside_its_storage_is_rejected(tmp_path):
    bad = Call(Glob("torch._utils", "_rebuild_tensor_v2"),
               (np.zeros(4, np.float32), 2, (2, 2), (2, 1), False, {}))
    with pytest.raises(ZooError, match="storage"):
        load_torch_file(write_torch_zip(tmp_path / "bad.pt", {"w": bad}))


# --- safetensors ------------------------------------------------------------------------------


def write_safetensors(path: Path, tensors: dict[str, tuple[str, tuple, bytes]], metadata=None) -> Path:
    header, body = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [len(body), len(body) + len(raw)]}
        body += raw
    if metadata:
        header["__metadata__"] = metadata
    encoded = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + body)
    return path


def test_safetensors_bf16_and_f16_written_by_hand(tmp_path):
    bits = np.random.default_rng(0).integers(0, 0x7F80, (3, 5), dtype=np.uint16)  # finite bf16
    half = np.random.default_rng(1).standard_normal((2, 3)).astype("<f2")
    path = write_safetensors(tmp_path / "w.safetensors", {
        "bf16": ("BF16", bits.shape, bits.astype("<u2").tobytes()),
        "f16": ("F16", half.shape, half.tobytes())}, metadata={"format": "pt"})
    weights, meta = read_checkpoint_with_meta(path)
    assert_same(weights, {"bf16": (bits.astype(np.uint32) << 16).view(np.float32), "f16": half})
    assert meta == {"format": "pt"}


def test_safetensors_round_trip_all_dtypes(tmp_path):
    save_file = pytest.importorskip("safetensors.numpy").save_file
    rng = np.random.default_rng(2)
    tensors = {dtype: rng.integers(-100, 100, (2, 3)).astype(dtype)
               for dtype in ("float32", "float16", "float64", "int64", "int32", "int16", "int8", "uint8")}
    tensors["bool"] = np.array([True, False, True])
    tensors["scalar"] = np.array(2.5, np.float32)
    tensors["empty"] = np.zeros((0, 4), np.float32)
    save_file(tensors, str(tmp_path / "all.safetensors"))
    weights = read_checkpoint(tmp_path / "all.safetensors")
    assert_same({k: weights[k] for k in tensors}, tensors)


def test_bad_safetensors_are_one_line_errors(tmp_path):
    good = write_safetensors(tmp_path / "good.safetensors", {"w": ("F32", (4,), bytes(16))}).read_bytes()
    (tmp_path / "truncated.safetensors").write_bytes(good[:-3])
    (tmp_path / "header.safetensors").write_bytes(good[:20])
    (tmp_path / "garbage.safetensors").write_bytes(struct.pack("<Q", 5) + b"{oops")
    (tmp_path / "tiny.safetensors").write_bytes(b"\x01")
    for name in ("truncated", "header", "garbage", "tiny"):
        with pytest.raises(ZooError) as error:
            read_checkpoint(tmp_path / f"{name}.safetensors")
        assert f"{name}.safetensors" in str(error.value) and "\n" not in str(error.value)


# --- what users get wrong ---------------------------------------------------------------------


def test_unusable_paths_are_one_line_errors(tmp_path):
    (tmp_path / "weights.onnx").write_bytes(b"x")
    (tmp_path / "dir.pt").mkdir()
    (tmp_path / "noise.pt").write_bytes(bytes(range(256)) * 4)
    write_torch_zip(tmp_path / "empty.pt", {"epoch": 1})
    (tmp_path / "best_openvino_model").mkdir()  # yolo export format=openvino's folder
    (tmp_path / "weights.bad").write_bytes(b"x")
    for name, reason in [("weights.onnx", "is an export (ONNX: a graph for another runtime"),
                         ("best_openvino_model", "is an export (OpenVINO: a graph for another runtime"),
                         ("weights.bad", "unknown weights format"), ("missing.pt", "no such file"),
                         ("dir.pt", "is a folder"), ("noise.pt", "is not a PyTorch checkpoint"), ("empty.pt", "no weights")]:
        with pytest.raises(ZooError) as error:
            read_checkpoint(tmp_path / name)
        message = str(error.value)
        assert not isinstance(error.value, UnsafeCheckpointError)
        assert name in message and reason in message and "\n" not in message, message


def test_values_torch_and_numpy_pickle(tmp_path):
    obj = {"w": Call(Glob("torch._tensor", "_rebuild_from_type_v2"),  # a tensor with Python attributes
                     (Glob("torch._utils", "_rebuild_tensor_v2"), Glob("torch", "Tensor"),
                      tensor([1, 2]).args, {"tag": 1})),
           "shape": Call(Glob("torch", "Size"), ([2, 3],)),
           "device": Call(Glob("torch", "device"), ("cuda", 0)),
           "dtype": Glob("torch", "bfloat16"),
           "best": np.float64(0.25), "steps": np.int64(7),  # numpy.dtype, scalar and _codecs.encode
           "config": Call(Glob("copyreg", "_reconstructor"), (Glob("mypkg", "Cfg"), Glob("builtins", "object"), None))}
    tree = load_torch_file(write_torch_zip(tmp_path / "values.pt", obj))
    np.testing.assert_array_equal(tree.pop("w"), np.float32([1, 2]))
    config = tree.pop("config")
    assert isinstance(config, StubObject) and type(config).stub_qualname == "mypkg.Cfg"
    assert tree == {"shape": (2, 3), "device": "cuda:0", "dtype": "torch.bfloat16", "best": 0.25, "steps": 7}
    assert type(tree["best"]) is np.float64 and type(tree["steps"]) is np.int64


def test_extension_codes_and_cycles_are_errors(tmp_path):
    with pytest.raises(ZooError, match="extension"):
        load_torch_file(write_torch_zip(tmp_path / "ext.pt", data=b"\x80\x02\x82\x01."))
    cyclic = {}
    cyclic["model"] = cyclic
    with pytest.raises(ZooError, match="cyclic"):
        read_checkpoint(write_torch_zip(tmp_path / "cyclic.pt", cyclic))


def test_a_zip_holding_a_record_twice_or_two_archives_is_refused(tmp_path):
    """A .pt zip holding archive/data/0 twice loaded the last copy, where PyTorch (2.14) loads the first: other
    weights than PyTorch's from the same file, without a word. Two archives were 'a zip file without data.pkl'."""
    import warnings
    import zipfile

    plain = write_torch_zip(tmp_path / "plain.pt", {"w": tensor(np.ones(3))})
    with zipfile.ZipFile(plain) as source:
        records = [(info.filename, source.read(info)) for info in source.infolist()]
    with warnings.catch_warnings():  # zipfile's "Duplicate name" is the point here
        warnings.simplefilter("ignore")
        with zipfile.ZipFile(tmp_path / "twice.pt", "w") as archive:
            for name, data in [*records, ("archive/data/0", np.zeros(3, np.float32).tobytes())]:
                archive.writestr(name, data)
    with zipfile.ZipFile(tmp_path / "two.pt", "w") as archive:
        for name, data in records:
            archive.writestr(name, data)
            archive.writestr(name.replace("archive/", "other/"), data)
    with pytest.raises(ZooError, match=r"twice.pt: cannot read .*the zip holds archive/data/0 more than once"):
        read_checkpoint(tmp_path / "twice.pt")
    with pytest.raises(ZooError, match=r"two.pt: cannot read .*a zip file of 2 archives \(archive/data.pkl, "
                                       r"other/data.pkl\): torch.save writes one"):
        read_checkpoint(tmp_path / "two.pt")
    assert np.array_equal(load_torch_file(plain)["w"], np.ones(3))
