"""Command-line front ends: ``python -m zoo.run`` and ``python -m zoo.validate``.

Each task (classify, detect, segment, inpaint) has a module here with
``add_arguments(parser)`` and ``run(args, model) -> exit code``.
"""
from __future__ import annotations

import argparse
import os
import sys
from contextlib import contextmanager
from typing import Callable

from zoo.errors import UsageError, ZooError, command_line, interrupted, interrupted_exits

with interrupted_exits():  # Ctrl-C while MLX loads (zoo-validate imports this package first): exit 130, no traceback
    from zoo.devices import DTYPES
    from zoo.files import note_nulled, release_output_folders, remove_created_folders

# exit codes: a command line that cannot work as written, as argparse; a problem met while running
EXIT_USAGE, EXIT_RUNTIME = 2, 1
# the reader of stdout left (``--help | head``): a shell's code for a writer stopped by SIGPIPE (128 + 13)
EXIT_READER_GONE = 141
# tasks whose command line is another task's: YOLO segmentation and pose models run as detectors do
# (their Results add masks / keypoints to what is drawn and written)
TASK_COMMANDS = {"instance-segment": "detect", "pose": "detect"}
# ultralytics names its run folders by its own task names: runs/segment for YOLO segmentation models
RUN_FOLDERS = {"instance-segment": "segment"}


def runs_folder(task: str) -> str:
    """The runs/<task> folder of a registry task, as ultralytics': runs/detect, runs/segment, runs/pose."""
    return f"runs/{RUN_FOLDERS.get(task, task)}"


def task_module(task: str):
    """The zoo.cli module that runs a registry task."""
    import importlib

    return importlib.import_module(f"zoo.cli.{TASK_COMMANDS.get(task, task)}")


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose mistakes are one ``error:`` line (exit 2), not a usage block and a second line, naming the
    ``help_command`` that lists the options (default: ``prog``; a task's: ``python -m zoo.run resnet50``)."""

    def __init__(self, *args, help_command: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.help_command = help_command or self.prog

    def error(self, message: str):
        raise UsageError(f"{message} (see {self.help_command} --help)")


def add_model_arguments(parser: argparse.ArgumentParser, dtypes: tuple[str, ...] | None = tuple(DTYPES),
                        dtype_help: str | None = None, weights_default: str = "the model's Hub weights") -> None:
    """The options every model command takes; ``dtypes``: the --dtype values (None: any, checked later);
    ``weights_default``: what --weights left out reads."""
    parser.add_argument("--weights", help="checkpoint (.safetensors/.pt/.pth/.ckpt/.bin) or synthetic[:SEED]; "
                        f"default: {weights_default}")
    parser.add_argument("--device", choices=("gpu", "cpu"), help="default: the GPU when MLX has one")
    parser.add_argument("--dtype", choices=dtypes, default="float32", help=dtype_help)
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")


def model_name_from(argv: list[str], prog: str, help_text: Callable[[], str] | None = None) -> str:
    """The MODEL positional, wherever it stands: it decides which options the task has. Without one,
    ``--help`` prints ``help_text()`` (default: zoo.run's general help) and exits."""
    peek = ArgumentParser(prog=prog, add_help=False)
    add_model_arguments(peek, dtypes=None)  # the task's parser checks the value (zoo.validate takes --dtype all)
    peek.add_argument("model", nargs="?")
    known, _ = peek.parse_known_args(argv)
    if known.model is not None:
        return known.model
    if any(a in ("-h", "--help") for a in argv):
        print(help_text() if help_text else general_help(prog))
        sys.exit(0)
    raise UsageError(f"no model given: usage {prog} MODEL ... (see {prog} --help)")


def model_option_as_name(argv: list[str], prog: str) -> list[str]:
    """IOPaint's ``--model=lama`` (its README: ``iopaint run --model=lama --device=cpu --image=DIR ...``) names the
    model as the MODEL positional does: ``argv`` with it as MODEL. Given both, they must be the same model."""
    from zoo import registry

    peek = ArgumentParser(prog=prog, add_help=False, allow_abbrev=False)
    add_model_arguments(peek, dtypes=None)
    peek.add_argument("--model")
    peek.add_argument("positional", nargs="?")
    known, _ = peek.parse_known_args(argv)
    if known.model is None:
        return argv
    rest, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--model":
            skip = True  # its value follows
        elif not arg.startswith("--model="):
            rest.append(arg)
    given = known.positional
    if given is None or not (registry.is_model(given) or registry.is_weights_file(given)):
        return [known.model, *rest]
    if registry.is_model(given) and registry.is_model(known.model) \
            and registry.get_spec(given).name == registry.get_spec(known.model).name:  # aliases, tags: the registry's
        return rest
    raise UsageError(f"--model {known.model} and MODEL {given} name two models: give one of them")


def general_help(prog: str) -> str:
    """``--help`` without a model: the models with their aliases, the common options, each task's options."""
    from zoo.registry import ALIASES, REGISTRY

    parser = ArgumentParser(prog=prog, usage=f"{prog} MODEL INPUT... [options]",
                            description="Run a model; MODEL --help shows one task's options in full. "
                                        "ultralytics' command line runs too: python -m zoo.run predict "
                                        "model=yolo11n.pt source=bus.jpg (python -m zoo.run predict --help)")
    aliases = {}
    for alias, name in ALIASES.items():
        aliases.setdefault(name, []).append(alias)
    models = ", ".join(name + (f" ({', '.join(aliases[name])})" if name in aliases else "") for name in REGISTRY)
    parser.add_argument("model", metavar="MODEL", help=models)
    add_model_arguments(parser)
    lines = [parser.format_help(), "task options:"]
    tasks = dict.fromkeys(spec.task for spec in REGISTRY.values())
    for task in tasks:
        names = [name for name, spec in REGISTRY.items() if spec.task == task]
        task_parser = ArgumentParser(prog=f"{prog} {names[0]}", add_help=False)
        task_module(task).add_arguments(task_parser)
        usage = task_parser.format_usage().removeprefix("usage: ").strip()
        lines.append(f"  {task} ({', '.join(names)}):\n    {' '.join(usage.split())}")
    lines.append(f"  annotate (detect, then segment: YOLO-segmentation labels; {prog} annotate --help):\n"
                 f"    {prog} annotate SOURCE... [--det yolov8n] [--sam mobilesam] [--out DIR]")
    from zoo.cli.ray_run import RAY_NOTE, TASKS as RAY_TASKS  # it imports this module

    lines.append(f"  Ray Data ({', '.join(RAY_TASKS)}):\n    {RAY_NOTE}")
    return "\n".join(lines)


def guarded(main):
    """Run a CLI entry point: an error is one ``error:`` line and exit 2 (usage) or 1 (runtime), no
    traceback unless --debug; a failed run leaves no empty output folder behind; the output folders the run
    locked (zoo.files.lock_output_folder) are released; NaN written as null is one note (zoo.files.note_nulled)."""
    def wrapper(argv=None):
        argv = sys.argv[1:] if argv is None else argv
        debug = "--debug" in argv
        try:
            with command_line(), file_names_printed_as_on_disk():
                refuse_removed_current_folder()
                refuse_empty_arguments(argv)
                code = main(argv)
        except ZooError as e:
            if debug:
                raise
            print(f"error: {one_line(e)}", file=sys.stderr)
            code = EXIT_USAGE if isinstance(e, UsageError) else EXIT_RUNTIME
        except KeyboardInterrupt:
            code = interrupted()
        except Exception as e:  # a bug, not a bad input: still one line, the traceback on request
            if isinstance(e, BrokenPipeError) and stdout_reader_gone():
                code = EXIT_READER_GONE  # it read what it wanted: no line, as a command piped to head ends
            elif debug:
                raise
            else:
                print(f"error: internal error ({type(e).__name__}: {one_line(e)}): rerun with --debug for the "
                      "traceback and report it", file=sys.stderr)
                code = EXIT_RUNTIME
        finally:
            release_output_folders()  # the run is over (a process's end releases them too, killed or not)
            note_nulled()  # what its files hold as null for NaN: one line for the run, whatever its end
        if code:
            remove_created_folders()  # a failed run leaves no empty output folder behind
        return code

    return wrapper


@contextmanager
def file_names_printed_as_on_disk():
    """While a command runs, a file name that is not UTF-8 (an old archive's Latin-1 caf\\xe9.png, which Python reads
    as 'caf\\udce9.png') prints as its bytes, as ls prints it: stdout's strict errors (a UTF-8 locale other than C's)
    ended the run in an internal error at the first such name. stdout's errors are put back after."""
    stdout = sys.stdout
    errors = getattr(stdout, "errors", None)
    if errors is None or not hasattr(stdout, "reconfigure"):  # a stream of the caller's own: left as it is
        yield
        return
    stdout.reconfigure(errors="surrogateescape")
    try:
        yield
    finally:
        stdout.reconfigure(errors=errors)


def stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reader has left (``python -m zoo.run --help | head``); if so, stdout is
    pointed at /dev/null, so that Python's own flush at exit does not fail on it again."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        gone = any(events & select.POLLERR for _, events in poller.poll(0))  # a pipe's writer end: no reader
    except (AttributeError, ValueError, OSError):  # no poll, or stdout is no file
        return False
    if gone:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return gone


def refuse_removed_current_folder() -> None:
    """ZooError where the current folder was removed (a shell still in it): relative paths and the records' folder
    cannot be resolved, and every run ended in an internal FileNotFoundError."""
    try:
        os.getcwd()
    except FileNotFoundError:
        raise ZooError("the current folder no longer exists (removed while this shell was in it): cd to an existing "
                       "folder and run again") from None


def refuse_empty_arguments(argv: list[str]) -> None:
    """UsageError for an empty argument (``--out "$DIR"`` with DIR unset): argparse takes it, and an empty path is
    the current folder: the run read or wrote there (``--jsonl ""`` wrote no records at all) without a word."""
    for i, arg in enumerate(argv):
        option, _, value = arg.partition("=") if arg.startswith("--") and "=" in arg else (None, "", arg)
        if value == "":
            where = f"{option}= is empty" if option else f"an empty argument{f' after {argv[i - 1]}' if i else ''}"
            raise UsageError(f"{where} (an unset shell variable?): pass a value")


@contextmanager
def usage_errors():
    """Checks of the command line's values that are not usage errors of their own (e.g. a case's
    option checks, shared with library callers): their ZooErrors become UsageErrors (exit 2)."""
    try:
        yield
    except UsageError:
        raise
    except ZooError as e:
        raise UsageError(str(e)) from None


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__
