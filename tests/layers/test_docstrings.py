"""Every public layer, model, task and config documents its arguments, shows an
example that runs, and names the paper it implements.

The `Example:` block of each docstring (a ```python fence) is executed here,
with `np`, `keras`, `ops`, `zoo` and the names of its own module in scope
(what `from zoo.layers.x import *` and the usual imports would give).
"""

import dataclasses
import inspect
import re
import sys

import keras
import numpy as np
import pytest
from keras import ops

import zoo
import zoo.layers
import zoo.models

LAYERS = [getattr(zoo.layers, name) for name in zoo.layers.__all__]
MODELS = [getattr(zoo.models, name) for name in zoo.models.__all__]
DOCUMENTED = LAYERS + MODELS
_FENCE = re.compile(r"Example:\s*\n\s*```python\n(.*?)\n\s*```", re.S)


def _own_arguments(cls):
    """The constructor arguments a zoo class defines (not Keras' own)."""
    for base in cls.__mro__:
        if base.__module__.startswith("zoo.") and "__init__" in vars(base):
            parameters = inspect.signature(base.__init__).parameters
            return [name for name in parameters if name not in ("self", "args", "kwargs")]
    return []


def _example(obj):
    match = _FENCE.search(inspect.getdoc(obj) or "")
    return None if match is None else inspect.cleandoc("\n" + match.group(1))


@pytest.mark.parametrize("obj", DOCUMENTED, ids=lambda obj: obj.__name__)
def test_docstring_has_args_example_and_references(obj):
    doc = inspect.getdoc(obj) or ""
    needs_args = not inspect.isclass(obj) or bool(_own_arguments(obj))
    if dataclasses.is_dataclass(obj):  # a family's config: its fields are attributes
        assert "Attributes:" in doc, f"{obj.__name__}: no Attributes section"
    elif needs_args:
        assert "Args:" in doc, f"{obj.__name__}: no Args section"
    assert _example(obj), f"{obj.__name__}: no ```python Example block"
    assert "References:" in doc, f"{obj.__name__}: no References section"


@pytest.mark.parametrize("obj", DOCUMENTED, ids=lambda obj: obj.__name__)
def test_docstring_example_runs(obj):
    keras.utils.set_random_seed(0)
    namespace = dict(vars(sys.modules[obj.__module__]))
    namespace.update(np=np, keras=keras, ops=ops, zoo=zoo)
    exec(compile(_example(obj), f"<{obj.__name__} example>", "exec"), namespace)
