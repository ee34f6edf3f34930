"""The exceptions users see: a one-line message naming the problem and the fix, in the words of the
interface that was called (a command line's flags, the Python API's keyword arguments)."""
import os
import sys
from contextlib import contextmanager

EXIT_INTERRUPTED = 130  # a shell's code for a command stopped by SIGINT (128 + 2)


class ZooError(Exception):
    """An expected failure (bad input, missing weights, no network ...).

    The CLIs print ``error: <message>`` and exit 1 (2 for a UsageError) without a
    traceback; library users can catch it. The message is one line and says how to fix it.
    """


class UsageError(ZooError):
    """A command line or call that can never work as written (a bad option value, a malformed
    prompt, an output that is an input): the CLIs exit 2, as argparse does."""


# True while a command line runs (zoo.cli.guarded): its errors name flags, the Python API's keyword arguments.
# A process-wide flag, not a context variable: the pipelines' reader and decoding threads raise errors too.
_in_command_line = False


@contextmanager
def command_line(flags: bool = True):
    """Errors raised inside speak the command line's words (``--overwrite``), not the API's; ``flags=False``: a
    command line whose words are the API's keyword arguments (ultralytics' ``imgsz=640``, zoo/cli/yolo_command.py),
    where a flag (``--imgsz``) is no word it takes."""
    global _in_command_line
    outer, _in_command_line = _in_command_line, flags
    try:
        yield
    finally:
        _in_command_line = outer


def in_command_line() -> bool:
    """Whether a command line runs (zoo.cli.guarded): an error may offer what only the Python API can do."""
    return _in_command_line


# options that a caller names otherwise (auto_annotate's det_weights for the detector's weights), by option() name
_renamed: dict[str, str] = {}


@contextmanager
def options_named(**names: str):
    """Errors raised inside name option ``key`` as its value: a shared loader's ``weights`` is annotate's
    ``det_weights`` (``--det-weights``) while it loads the detector."""
    outer = dict(_renamed)
    _renamed.update(names)
    try:
        yield
    finally:
        _renamed.clear()
        _renamed.update(outer)


def keyword(name: str) -> str:
    """How the reader of an error names option ``name`` (the keyword argument's name): ``--name`` inside a command
    line, ``name`` from Python."""
    name = _renamed.get(name, name)
    return f"--{name.replace('_', '-')}" if _in_command_line else name


def option(name: str, value: object = True) -> str:
    """How the reader of an error sets option ``name`` (the keyword argument's name) to ``value``: ``--name
    VALUE`` (``--name`` for True, ``no --name`` for False) inside a command line, ``name=VALUE`` from Python
    (``name='text'`` for text, ``name=PATH`` for a placeholder)."""
    if _in_command_line:
        flag = keyword(name)
        if value is False:
            return f"no {flag}"
        return flag if value is True else f"{flag} {' '.join(map(str, value)) if isinstance(value, list) else value}"
    name = keyword(name)
    return f"{name}={value if isinstance(value, str) and value.isupper() else repr(value)}"  # PATH, N: placeholders


def interrupted() -> int:
    """Ctrl-C in a command: one line, no traceback; the exit code."""
    print("interrupted", file=sys.stderr)
    return EXIT_INTERRUPTED


# the console scripts of pyproject.toml's [project.scripts] (tests/test_packaging.py checks that the two agree)
COMMAND_SCRIPTS = ("zoo-run", "zoo-validate")


def started_as_command() -> bool:
    """Whether this process is one of mlx-zoo's commands: ``python -m zoo...`` or a console script, not a program of
    the user's that imports zoo. Under ``-m``, while runpy imports the module's packages (zoo first), sys.argv[0]
    is "-m" and sys.orig_argv holds the module's name just before sys.argv's other items ("-mzoo.run" when
    written as one)."""
    argv0 = sys.argv[0] if sys.argv else ""
    if argv0 == "-m":
        orig = sys.orig_argv
        at = len(orig) - len(sys.argv)
        if at < 1:
            return False
        module = orig[at].partition("m")[2] if orig[at].startswith("-") else orig[at]
        return module == "zoo" or module.startswith("zoo.")
    return os.path.basename(argv0) in COMMAND_SCRIPTS


@contextmanager
def interrupted_exits(commands_only: bool = False):
    """Around a command's module-level imports (MLX loads for seconds on a Mac's first run): Ctrl-C meanwhile ends
    the process as during its run (zoo.cli.guarded), 'interrupted' and exit 130, not a traceback. It ends the process
    (SystemExit) from inside an import, so only the command modules use it as it is. ``commands_only``: around the
    library's own packages' imports (``import zoo``: OpenBLAS, the native build's check), which runpy and the console
    scripts import before the command's module: the exit only where the process is a command (started_as_command);
    a program's own ``import zoo`` keeps its KeyboardInterrupt."""
    try:
        yield
    except KeyboardInterrupt:
        if commands_only and not started_as_command():
            raise
        raise SystemExit(interrupted()) from None
