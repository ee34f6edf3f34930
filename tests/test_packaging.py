"""Every package folder is installed under the single import root `zoo`."""
import ast
import os
import re
import sys
from pathlib import Path

import pytest

from conftest import pyproject


ROOT = Path(__file__).parent.parent


def test_every_package_folder_is_listed():
    config = pyproject()["tool"]["setuptools"]
    listed = set(config["packages"])
    roots = config["package-dir"]
    found = set()
    for package, folder in roots.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            name = ".".join((package, *rel))
            if not any(name.startswith(other + ".") and other != package and other.startswith(package) for other in roots):
                found.add(name)
    assert found == listed


def test_reference_imports_numpy_only():
    """validate/reference must stay independent of MLX and the models: numpy and the standard library only."""
    for path in (ROOT / "validate" / "reference").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                modules = [node.module or ""] if node.level == 0 else []
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                assert top == "numpy" or top in sys.stdlib_module_names, f"{path.name} imports {module}"


def imported_modules(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            modules.add(node.module or "")
    return modules


@pytest.mark.parametrize("folder, forbidden, exempt", [
    ("models", ("zoo.validate", "zoo.cli"), ()),
    ("weights", ("zoo.models", "zoo.validate", "zoo.cli", "zoo.kernels"), ()),
    # the kernels' GPU self-test checks them against the numpy reference: the one exception
    ("zoo/kernels", ("zoo.models", "zoo.validate", "zoo.cli"), ("selftest.py",)),
    ("validate/cases", ("zoo.cli",), ()),
])
def test_dependency_rules(folder, forbidden, exempt):
    for path in (ROOT / folder).rglob("*.py"):
        if path.name in exempt:
            continue
        for module in imported_modules(path):
            assert not module.startswith(forbidden), f"{path.relative_to(ROOT)} imports {module}"


def test_ci_runs_the_readme_test_command_verbatim():
    """README's test block runs in the docs test (tests/docs) and CI runs it: .ci/run must hold its line exactly."""
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"Run the tests[^\n]*\n\n```bash\n(.*?)\n```", readme, re.S)
    assert block is not None, "README's 'Run the tests' block is gone"
    command = block.group(1).strip()
    assert "\n" not in command and command in (ROOT / ".ci" / "run").read_text().splitlines()


def test_the_suite_checks_the_defaults_whatever_the_shell_exports():
    """A reader who exported README's ZOO_WEIGHTS=synthetic, or a raised pixel limit, for their own runs and then
    runs the tests: the suite checks the defaults still (a pixel-limit test failed under ZOO_MAX_IMAGE_PIXELS)."""
    import subprocess

    env = {**os.environ, "ZOO_MAX_IMAGE_PIXELS": "1000", "ZOO_WEIGHTS": "synthetic"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/test_images.py::test_truncated_file"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:]


def test_the_console_scripts_are_the_commands_ctrl_c_ends_in_one_line():
    """zoo.errors.started_as_command knows the console scripts by name (`import zoo` cannot read the installed
    metadata at no cost): a script added to pyproject.toml and not there would print a traceback on a Ctrl-C in
    `import zoo`."""
    from zoo.errors import COMMAND_SCRIPTS

    assert sorted(COMMAND_SCRIPTS) == sorted(pyproject()["project"]["scripts"])
