"""The former home of `from_pretrained` and `export`: they are
`zoo.from_pretrained`, `zoo.export` and the rest of `zoo.checkpoints`.
Each name here still works, with a warning, for one release."""

import warnings

import zoo.checkpoints


def __getattr__(name):
    if name.startswith("__") or not hasattr(zoo.checkpoints, name):
        raise AttributeError(f"module 'zoo.pretrained' has no attribute {name!r}")
    warnings.warn(
        f"zoo.pretrained.{name} is zoo.checkpoints.{name}; zoo.pretrained goes in the next release.",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(zoo.checkpoints, name)
