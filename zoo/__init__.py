"""zoo: a Keras 3 model zoo of Transformers.

    import zoo
    model = zoo.build("gpt2-small", task="causal_lm")

`import zoo` registers the layers and models with Keras' serialization
(so `keras.saving.load_model` finds them); they need only Keras, so `zoo`'s
core imports on a backend without TensorFlow. The rest (data pipelines,
generation, conversion) loads on first use.
"""

import importlib

__version__ = "0.1.0"

from zoo import layers, models  # noqa: E402,F401  (registers serializable classes)

_EXPORTS = {
    "build": "zoo.factory",
    "describe": "zoo.factory",
    "list_presets": "zoo.factory",
    "plot": "zoo.factory",
    "generate": "zoo.generation",
    "from_keras_hub": "zoo.convert",
    "from_pretrained": "zoo.pretrained",
    "export": "zoo.pretrained",
    "load": "zoo.saving",
    "save": "zoo.saving",
}
_SUBMODULES = ("convert", "data", "factory", "generation", "layers", "models", "presets", "pretrained", "saving", "training")

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    if name in _SUBMODULES:
        return importlib.import_module(f"zoo.{name}")
    raise AttributeError(f"module 'zoo' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_EXPORTS) + list(_SUBMODULES))
