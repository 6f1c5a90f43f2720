"""One compiled function per (model, input shapes, sampler configuration).

The whole decoding loop - encoder, prompt prefill, and the `while_loop`s
over new positions (one per cache stage) - is traced once into one function and compiled with
XLA (`tf.function(jit_compile=True)` on TensorFlow, `jax.jit` on JAX); a
later call with the same shapes and configuration reuses it. Other backends
run the same function eagerly.
"""

import collections
import itertools
import weakref

import keras

_COMPILED = weakref.WeakKeyDictionary()  # model -> OrderedDict(key -> function)
_PER_MODEL = 32  # the most recently used functions kept per model
_TRACES = [0]


def trace_count():
    """How many times a decoding function has been traced in this process
    (each trace means a new compilation)."""
    return _TRACES[0]


class _Traced:
    """Wrap `fn` so that each trace (each run of its Python body) is counted.

    A callable object rather than a closure: TensorFlow tells apart the
    functions it watches for retracing by their code object, and every
    closure shares one, so compiling one function per shape (by design)
    would read as retracing.
    """

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *args):
        _TRACES[0] += 1
        return self.fn(*args)


def get_or_compile(model, key, build):
    """The function cached for `model` under `key`.

    `build(model_ref)` makes `(fn, sampler)` the first time: `fn(*arrays)`
    returns a tuple of tensors, `sampler` owns the random-seed variables
    `fn` updates. The cache holds the model weakly (`model_ref()`), so that
    a compiled function does not keep its model alive.
    """
    per_model = _COMPILED.setdefault(model, collections.OrderedDict())
    if key in per_model:
        per_model.move_to_end(key)
    else:
        model_ref = weakref.ref(model)
        fn, sampler = build(model_ref)
        per_model[key] = (_compile(_Traced(fn), model_ref, sampler), sampler)
        if len(per_model) > _PER_MODEL:
            per_model.popitem(last=False)
    return per_model[key]


def _compile(fn, model_ref, sampler):
    backend = keras.config.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        compiled = tf.function(fn, jit_compile=True)
        return lambda *arrays: tuple(x.numpy() for x in compiled(*arrays))
    if backend == "jax":
        return _jax_compile(fn, model_ref, sampler)
    return lambda *arrays: tuple(keras.ops.convert_to_numpy(x) for x in fn(*arrays))


def _jax_compile(fn, model_ref, sampler):
    """JAX arrays are immutable: the model's and the sampler's variables go
    in as arguments (read through a `StatelessScope`), the sampler's new
    seed state comes out and is assigned back, as keras-hub's CausalLM."""
    import jax
    import numpy as np

    @jax.jit
    def compiled(state, arrays):
        model = model_ref()
        sampler_values, trainable, non_trainable = state
        mapping = itertools.chain(
            zip(sampler.variables, sampler_values),
            zip(model.trainable_variables, trainable),
            zip(model.non_trainable_variables, non_trainable),
        )
        with keras.StatelessScope(state_mapping=mapping) as scope:
            outputs = fn(*arrays)
        new_sampler_values = []
        for variable, value in zip(sampler.variables, sampler_values):
            new = scope.get_current_value(variable)
            new_sampler_values.append(value if new is None else new)
        return outputs, new_sampler_values

    def run(*arrays):
        model = model_ref()
        state = (
            [v.value for v in sampler.variables],
            [v.value for v in model.trainable_variables],
            [v.value for v in model.non_trainable_variables],
        )
        outputs, new_sampler_values = compiled(state, arrays)
        for variable, value in zip(sampler.variables, new_sampler_values):
            variable.assign(value)
        return tuple(np.asarray(x) for x in outputs)

    return run
