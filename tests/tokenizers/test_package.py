"""`zoo.tokenizers` stands on Keras and NumPy alone: `import zoo`, which
registers its classes with Keras' serialization, pulls in no data code, no
model code and none of the libraries that run a tokenizer."""

import subprocess
import sys
from pathlib import Path

import zoo.tokenizers

ROOT = Path(__file__).resolve().parents[2]


def test_public_names_exist():
    for name in zoo.tokenizers.__all__:
        assert hasattr(zoo.tokenizers, name), name


def test_import_pulls_in_no_data_models_or_tokenizer_libraries():
    # `zoo/__init__.py` is bypassed (an empty `zoo` package stands in for it),
    # so what is imported is what `zoo.tokenizers` itself needs.
    code = f"""
import sys, types
package = types.ModuleType("zoo")
package.__path__ = [{str(ROOT / "zoo")!r}]
sys.modules["zoo"] = package
import zoo.tokenizers
heavy = ("zoo.data", "zoo.models", "zoo.layers", "keras_hub", "tokenizers", "sentencepiece", "jinja2")
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
