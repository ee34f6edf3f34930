"""Every package folder is installed under the single import root `zoo`."""
import ast
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_every_package_folder_is_listed():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
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


def test_models_never_import_the_validator_or_cli():
    for path in (ROOT / "models").rglob("*.py"):
        text = path.read_text()
        assert "zoo.validate" not in text and "zoo.cli" not in text, path.name
