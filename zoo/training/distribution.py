"""The distribution strategy of a recipe, by name: a `tf.distribute`
strategy on TensorFlow, `keras.distribution.DataParallel` on JAX.

TensorFlow loads only when a TensorFlow strategy is asked for.
"""

import keras

STRATEGIES = ("default", "mirrored", "multi-worker", "tpu")


def distribution_scope(name):
    """A scope for model creation and compile, by strategy name.

    TensorFlow: a `tf.distribute` strategy (the dataset's batch is the global
    batch; Keras splits it across replicas). JAX: `keras.distribution.DataParallel`.
    """
    import contextlib

    if name == "default":
        return contextlib.nullcontext()
    if name not in STRATEGIES:
        raise ValueError(f"--strategy must be one of {STRATEGIES}; got {name!r}.")
    if keras.backend.backend() == "jax":
        if name != "mirrored":
            raise ValueError(f"--strategy {name} needs the TensorFlow backend; with JAX use 'mirrored' (DataParallel).")
        keras.distribution.set_distribution(keras.distribution.DataParallel())
        return contextlib.nullcontext()
    import tensorflow as tf

    if name == "mirrored":
        strategy = tf.distribute.MirroredStrategy()
    elif name == "multi-worker":
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    else:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        strategy = tf.distribute.TPUStrategy(resolver)
    return strategy.scope()
