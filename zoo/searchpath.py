"""Where a user's folder goes on ``sys.path``: after the standard library's entries, before site-packages.

``python -m zoo.run`` puts the current folder first, and the validator's ``--module FILE.py:FACTORY`` the file's
folder: a user's json.py or copy.py there then took the place of the standard library's module for every import
after (an internal error at the first ``json.dumps``, the run's report lost). After the standard library, the
folder's own modules still come before installed packages, as Python orders them. Imports os and sys only: it
runs before the package's other imports.
"""
import os
import sys


def after_standard_library(folder: str) -> None:
    """Put ``folder`` on sys.path (moved there if it is on it) just after the standard library's entries."""
    if folder in sys.path:
        sys.path.remove(folder)
    bases = tuple(os.path.realpath(p) + os.sep for p in {sys.base_prefix, sys.base_exec_prefix})
    standard = [i for i, entry in enumerate(sys.path) if "site-packages" not in entry
                and (os.path.realpath(entry) + os.sep).startswith(bases)]
    sys.path.insert(max(standard, default=-1) + 1, folder)


def demote_current_folder() -> None:
    """A command started as ``python -m zoo...``: its current folder, which -m put first, after the standard
    library (a user's program that imports zoo keeps its sys.path)."""
    from .errors import started_as_command  # zoo.errors imports os, sys and contextlib: loaded at start-up

    if started_as_command() and sys.path and sys.path[0] == os.getcwd():
        after_standard_library(sys.path[0])
