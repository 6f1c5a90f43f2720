"""`zoo.data` stands alone: it imports no model code and no heavy extras."""

import subprocess
import sys
from pathlib import Path

import zoo.data

ROOT = Path(__file__).resolve().parents[2]


def test_public_names_exist():
    for name in zoo.data.__all__:
        assert hasattr(zoo.data, name), name


def test_import_pulls_in_no_models_layers_or_extras():
    # `zoo/__init__.py` is bypassed (an empty `zoo` package stands in for it),
    # so what is imported is what `zoo.data` itself needs.
    code = f"""
import sys, types
package = types.ModuleType("zoo")
package.__path__ = [{str(ROOT / "zoo")!r}]
sys.modules["zoo"] = package
import zoo.data
heavy = ("zoo.models", "zoo.layers", "keras_hub", "tensorflow_datasets")
print(sorted(name for name in heavy if name in sys.modules))
"""
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"},
    )
    assert result.stdout.strip().splitlines()[-1] == "[]"
