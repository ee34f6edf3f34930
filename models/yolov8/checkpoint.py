"""What a YOLOv8 checkpoint says about itself: other namings mapped to ultralytics' (Candle/tinygrad),
class names from its metadata."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from zoo.errors import ZooError

CLASS_NAMES = Path(__file__).parent.parent / "data" / "coco_classes.txt"


def class_names() -> list[str]:
    return CLASS_NAMES.read_text().splitlines()

# lmz/candle-yolo-v8 (tinygrad's naming) -> ultralytics: docs/weights.md has the table.
CANDLE_PREFIXES = {
    "net.b1.0.": "model.0.", "net.b1.1.": "model.1.", "net.b2.0.": "model.2.", "net.b2.1.": "model.3.",
    "net.b2.2.": "model.4.", "net.b3.0.": "model.5.", "net.b3.1.": "model.6.", "net.b4.0.": "model.7.",
    "net.b4.1.": "model.8.", "net.b5.0.": "model.9.",
    "fpn.n1.": "model.12.", "fpn.n2.": "model.15.", "fpn.n3.": "model.16.", "fpn.n4.": "model.18.",
    "fpn.n5.": "model.19.", "fpn.n6.": "model.21.",
    "head.": "model.22.",
}


def sanitize(state_dict: dict, meta: dict) -> dict:
    """ultralytics naming as is; Candle/tinygrad naming (net.*, fpn.*, head.*) mapped to it."""
    if not any(k.startswith(("net.", "fpn.", "head.")) for k in state_dict):
        return state_dict
    out = {}
    for key, value in state_dict.items():
        prefix = next((p for p in CANDLE_PREFIXES if key.startswith(p)), None)
        if prefix is not None:
            key = CANDLE_PREFIXES[prefix] + re.sub(r"(^|\.)bottleneck\.", r"\1m.", key[len(prefix):])
        out[key] = value
    return out


def apply_metadata(model, meta: dict) -> None:
    """Class names stored in the checkpoint replace the COCO default: ultralytics keeps an
    {id: name} dict; a safetensors file's metadata can only hold it as text (a dict or list literal)."""
    names = meta.get("names")
    if names is None:
        return
    try:
        if isinstance(names, str):
            names = ast.literal_eval(names)
        if isinstance(names, dict):
            names = [names[k] for k in sorted(names, key=int)]
        names = [str(n) for n in names]
    except (ValueError, SyntaxError, TypeError):
        raise ZooError("the checkpoint's 'names' metadata is not a list or an {id: name} dict: "
                       "fix or remove it from the checkpoint") from None
    nc = model.nc
    if len(names) != nc:
        raise ZooError(f"the checkpoint names {len(names)} classes but its detection head has {nc}: "
                       "pass a checkpoint whose names match its head")
    model.names = names


