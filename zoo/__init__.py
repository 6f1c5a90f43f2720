"""zoo: a Keras 3 model zoo of Transformers.

    import zoo
    model = zoo.build("gpt2-small", task="causal_lm")

`import zoo` registers everything a file written by the zoo holds with
Keras' serialization (layers, models, losses, metrics, learning-rate
schedules, the tokenizers of `zoo.tokenizers`), so that
`zoo.load` and `keras.saving.load_model` find them in a new process; they
need only Keras (and `tokenizers` to read a tokenizer.json), so `zoo`'s
core imports on a backend without TensorFlow. The rest (data
pipelines, generation, conversion) loads on first use. On TensorFlow,
`import zoo` also points XLA's persistent cache at the zoo's cache folder
(`TF_XLA_FLAGS`, see `zoo.compile_cache`; `ZOO_COMPILE_CACHE=0` turns it
off).

A model that carries a tokenizer works on text:

    lm = zoo.load("runs/gpt_char/model.keras")
    zoo.generate(lm, "ROMEO:", max_length=300)  # text in, text out
"""

__version__ = "0.1.0"

from zoo import compile_cache as _compile_cache  # noqa: E402
from zoo import layers, models, tokenizers, training  # noqa: E402,F401  (registers serializable classes)

if _compile_cache.keras_backend() == "tensorflow":  # TensorFlow reads its XLA flags once, at its first tf.function
    _compile_cache.configure("tensorflow")

_EXPORTS = {
    "build": "zoo.factory",
    "describe": "zoo.factory",
    "list_presets": "zoo.factory",
    "preset_info": "zoo.factory",
    "plot": "zoo.factory",
    "generate": "zoo.text",
    "stream": "zoo.text",
    "translate": "zoo.text",
    "classify": "zoo.text",
    "embed": "zoo.text",
    "score": "zoo.text.scoring",
    "score_rolling": "zoo.text.scoring",
    "from_keras_hub": "zoo.checkpoints",
    "from_pretrained": "zoo.checkpoints",
    "export": "zoo.deployment",
    "load": "zoo.saving",
    "save": "zoo.saving",
}
_SUBMODULES = (
    "checkpoints",
    "data",
    "deployment",
    "factory",
    "generation",
    "layers",
    "models",
    "presets",
    "saving",
    "text",
    "tokenizers",
    "training",
)

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    """The exports and submodules, imported when first read: `import zoo`
    stays light."""
    if name in _EXPORTS:
        return getattr(_submodule(_EXPORTS[name].removeprefix("zoo.")), name)
    if name in _SUBMODULES:
        return _submodule(name)
    raise AttributeError(f"module 'zoo' has no attribute {name!r}")


def _submodule(name):
    """zoo.`name`, imported. Import statements, not names in strings: the
    import contracts see every edge."""
    import sys

    if name == "checkpoints":
        import zoo.checkpoints
    elif name == "data":
        import zoo.data
    elif name == "deployment":
        import zoo.deployment
    elif name == "factory":
        import zoo.factory
    elif name == "generation":
        import zoo.generation
    elif name == "presets":
        import zoo.presets
    elif name == "saving":
        import zoo.saving
    elif name == "text":
        import zoo.text
    elif name == "text.scoring":
        import zoo.text.scoring
    return sys.modules[f"zoo.{name}"]


def __dir__():
    return sorted(list(globals()) + list(_EXPORTS) + list(_SUBMODULES))
