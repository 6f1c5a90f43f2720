"""One compiled function per (model, input shapes, configuration).

A decoding function - a whole generation, or the prefill and a stage's
`while_loop` of a stream (`zoo.generation.loop`), or beam search's whole
loop (`zoo.generation.beam`) - is a Python callable
traced once and compiled with XLA (`tf.function(jit_compile=True)` on
TensorFlow, `jax.jit` on JAX); a later call with the same shapes and
configuration reuses it. Other backends run the same function eagerly.

On JAX the functions least recently used past 32 per model are dropped,
and their programs with them. TensorFlow keeps every XLA program it
compiles for the life of the process, whether or not its function is
kept: dropping one would free nothing, and compiling it again would cost
its memory a second time. So on TensorFlow every function is kept; what
bounds their number is the shapes they are compiled for (a server rounds
them up to a few buckets, `zoo.generation.Decoding`'s `bucket`).
"""

import collections
import itertools
import weakref

import keras

_COMPILED = weakref.WeakKeyDictionary()  # model -> OrderedDict(key -> Compiled)
_PER_MODEL = 32  # the most recently used functions kept per model
_TRACES = [0]


def trace_count():
    """How many times a decoding function has been traced in this process
    (each trace means a new compilation)."""
    return _TRACES[0]


def count_trace():
    """Called first in every decoding function's body, so once per trace."""
    _TRACES[0] += 1


def lookup(model, key):
    """The `Compiled` function cached for `model` under `key`, or None."""
    per_model = _COMPILED.get(model)
    if per_model is None or key not in per_model:
        return None
    per_model.move_to_end(key)
    return per_model[key]


def compile(model, key, function):
    """Compiles `function` for `model` and caches it under `key`.

    Args:
        model: the model `function` decodes with (held weakly, here and by
            the function, so that a compiled function does not keep its
            model alive).
        key: hashable, what the traced function depends on.
        function: a decoding function: called with the input arrays, it
            returns a tuple of tensors; it has `model`. It has no state of
            its own: the random draws come from the seeds in its inputs
            (`zoo.generation.samplers`).

    Returns:
        The `Compiled` function.
    """
    per_model = _COMPILED.setdefault(model, collections.OrderedDict())
    per_model[key] = Compiled(function)
    if len(per_model) > _PER_MODEL and keras.config.backend() != "tensorflow":
        per_model.popitem(last=False)
    return per_model[key]


class Compiled:
    """A decoding function compiled for the backend: `compiled(*arrays)`
    -> a tuple of its outputs as NumPy arrays (dicts of them kept);
    `compiled.raw(*arrays)` -> its outputs as the backend's tensors, to feed
    to the next call.

    `function` is a callable object, not a closure: TensorFlow tells apart
    the functions it watches for retracing by their code object, and every
    closure shares one, so compiling one function per shape (by design)
    would read as retracing.
    """

    def __init__(self, function):
        self.function = function
        self.backend = keras.config.backend()
        if self.backend == "tensorflow":
            import tensorflow as tf

            # No AutoGraph: the loops are `ops.while_loop`s already, and the
            # Python `for` over the cache stages is meant to unroll.
            self.compiled = tf.function(function, jit_compile=True, autograph=False)
            self.concrete = {}  # input shapes -> concrete function
        elif self.backend == "jax":
            import jax

            self.compiled = jax.jit(self.stateless)
        else:
            self.compiled = function

    def __call__(self, *arrays):
        return tuple(keras.tree.map_structure(keras.ops.convert_to_numpy, self.raw(*arrays)))

    def raw(self, *arrays):
        if self.backend == "tensorflow":
            return self._concrete(arrays)(*arrays)
        if self.backend != "jax":
            return self.compiled(*arrays)
        model = self.function.model
        state = ([v.value for v in model.trainable_variables], [v.value for v in model.non_trainable_variables])
        return self.compiled(state, arrays)

    def _concrete(self, arrays):
        """TensorFlow's traced function for these input shapes, called
        directly: matching a `tf.function`'s signature on every call costs
        milliseconds, a stream calls once per token."""
        import tensorflow as tf

        signature = repr(keras.tree.map_structure(lambda x: None if x is None else (tuple(x.shape), str(x.dtype)), arrays))
        concrete = self.concrete.get(signature)
        if concrete is None:
            specs = keras.tree.map_structure(lambda x: x if x is None else tf.TensorSpec(x.shape, tf.as_dtype(x.dtype)),
                                             arrays)
            concrete = self.concrete[signature] = self.compiled.get_concrete_function(*specs)
        return concrete

    def stateless(self, state, arrays):
        """The function as `jax.jit` traces it. JAX arrays are immutable:
        the model's variables come in as `state`, read through a
        `StatelessScope`, as keras-hub's CausalLM does it."""
        model = self.function.model
        trainable, non_trainable = state
        mapping = itertools.chain(zip(model.trainable_variables, trainable),
                                  zip(model.non_trainable_variables, non_trainable))
        with keras.StatelessScope(state_mapping=mapping):
            return self.function(*arrays)
