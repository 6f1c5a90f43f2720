"""Each weight drawn on its own.

A Keras initializer object built without a seed draws the same values at
every call (it holds one default seed), so one object handed to several
layers - a model's `kernel_initializer` given to every block, each
block's to its projections - would start them all with the same weights:
every block alike, a gated feed-forward's two kernels alike. Each layer
that makes a weight from an initializer it was given draws from `fresh`,
as keras-hub's layers clone theirs.
"""

import keras


def fresh(initializer):
    """A copy of `initializer` (an object, a name or a config) with its own
    draws: the same class and arguments; without a seed, a new one. An
    initializer given a seed keeps it (Keras' contract: the same seed, the
    same values)."""
    initializer = keras.initializers.get(initializer)
    if initializer is None or not isinstance(initializer, keras.initializers.Initializer):
        return initializer
    return initializer.__class__.from_config(initializer.get_config())
