"""The former home of the weight mappings (`from_keras_hub`,
`to_keras_hub`, `huggingface_names`, ...): they are in `zoo.checkpoints`.
Each name here still works, with a warning, for one release."""

import warnings

import zoo.checkpoints


def __getattr__(name):
    if name.startswith("__") or not hasattr(zoo.checkpoints, name):
        raise AttributeError(f"module 'zoo.convert' has no attribute {name!r}")
    warnings.warn(
        f"zoo.convert.{name} is zoo.checkpoints.{name}; zoo.convert goes in the next release.",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(zoo.checkpoints, name)
