"""Command-line front ends: ``python -m zoo.run`` and ``python -m zoo.validate``.

Each task (classify, detect, segment, inpaint) has a module here with
``add_arguments(parser)`` and ``run(args, model) -> exit code``.
"""
from __future__ import annotations

import argparse
import sys

from zoo.devices import DTYPES
from zoo.errors import ZooError
from zoo.files import remove_created_folders

def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--weights", help="checkpoint (.safetensors/.pt/.pth/.ckpt/.bin) or synthetic[:SEED]; default: the model's Hub weights")
    parser.add_argument("--device", choices=("gpu", "cpu"), help="default: the GPU when MLX has one")
    parser.add_argument("--dtype", choices=tuple(DTYPES), default="float32")


def model_name_from(argv: list[str], prog: str) -> str:
    """The MODEL positional, wherever it stands: it decides which options the task has."""
    peek = argparse.ArgumentParser(prog=prog, add_help=False)
    add_model_arguments(peek)
    peek.add_argument("model", nargs="?")
    known, _ = peek.parse_known_args(argv)
    if known.model is not None:
        return known.model
    if any(a in ("-h", "--help") for a in argv):
        from zoo.registry import list_models

        print(f"usage: {prog} MODEL [options]   (MODEL: {', '.join(list_models())})")
        sys.exit(0)
    raise ZooError(f"no model given: usage {prog} MODEL ...")


def guarded(main):
    """Run a CLI entry point; expected errors print one line and exit 2, no traceback."""
    def wrapper(argv=None):
        try:
            code = main(sys.argv[1:] if argv is None else argv)
        except ZooError as e:
            print(f"error: {e}", file=sys.stderr)
            code = 2
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            code = 130
        if code:
            remove_created_folders()  # a failed run leaves no empty output folder behind
        return code

    return wrapper
