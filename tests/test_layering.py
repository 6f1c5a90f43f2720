"""The layers of pyproject.toml's `[tool.importlinter]` hold (docs/design.md
draws them): every import points down, no two modules import each other, no
module takes another's private name, nothing reads Keras' private
`keras.src`, and no module is imported by a name in a string."""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("zoo", "recipes")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _sources():
    return sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))


def _module_name(path):
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path):
    """(line, module, names) of each `import` and `from ... import` of a file, at any depth."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, ()
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module, tuple(alias.name for alias in node.names)


@pytest.mark.skipif(not (LINT_IMPORTS.exists() or shutil.which("lint-imports")), reason="import-linter is not installed")
def test_the_import_contracts_are_kept():
    command = str(LINT_IMPORTS) if LINT_IMPORTS.exists() else shutil.which("lint-imports")
    result = subprocess.run([command, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_two_modules_import_each_other():
    modules = {_module_name(path): path for path in _sources()}
    imported = {name: set() for name in modules}
    for name, path in modules.items():
        for _, module, names in _imports(path):
            submodules = {f"{module}.{n}" for n in names} & modules.keys()  # `from package import module`
            whole = len(submodules) < len(names) or not names
            for target in submodules | ({module} if whole else set()):
                if target in modules and target != name:
                    imported[name].add(target)
    pairs = sorted({tuple(sorted((a, b))) for a in imported for b in imported[a] if a in imported.get(b, ())})
    assert not pairs, f"modules that import each other: {pairs}"


def test_no_module_takes_a_private_name_of_another_or_keras_src():
    found = []
    for path in _sources():
        for line, module, names in _imports(path):
            where = f"{path.relative_to(ROOT)}:{line}"
            if module == "keras.src" or module.startswith("keras.src."):
                found.append(f"{where} imports {module}")
            if module.split(".")[0] in PACKAGES:
                private = [n for n in names if n.startswith("_")] + [p for p in module.split(".") if p.startswith("_")]
                found += [f"{where} takes {module}.{n}" for n in private]
    assert not found, "\n".join(found)


def test_the_project_imports_its_modules_by_import_statements_not_by_name():
    """`importlib.import_module` or `__import__` of a name in a string hides
    an edge from the import contracts."""
    found = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                function = node.func
                name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", "")
                if name in ("import_module", "__import__"):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} calls {name}")
    assert not found, "\n".join(found)
