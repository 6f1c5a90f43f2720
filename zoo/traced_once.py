"""A stack's blocks traced once into a TensorFlow graph, not once each.

The N blocks of a stack run the same code on their own weights. Traced
block by block, a compiled decoding function repeats that code N times:
on SmolLM2-135M's shape (30 blocks) the generation loop's graph held
7,600 operations outside its loop's body, and every process paid ~5 s to
trace it and ~3.5 s for TensorFlow's conversion to XLA, even when the
compiled program itself came from the persistent compilation cache
(whose key is the converted program).

Within `sharing()` (what `zoo.generation`'s compiled functions trace
under), `call_block(blocks, i, ...)` (block i's `call`) and
`apply_block(blocks, i, ...)` (its `__call__`) inside a TensorFlow graph call one
`tf.function` traced for the first block of the stack with block i's
configuration, given block i's variables' values as arguments (read
through a `keras.StatelessScope`, as `jax.jit` reads a model's). The
function is marked `_noinline`, so that TensorFlow's bridge to XLA
converts its body once for all the calls with the same argument shapes;
XLA's compiler then inlines the calls. Elsewhere (JAX, PyTorch, eager
TensorFlow, outside `sharing()`) each block calls itself.

Blocks share a trace when they are of one class, with the same config
but for their name, and the same variables (names, shapes, dtypes) in
the same order: Gemma 3's local and global blocks differ in their
attention options, so each kind is traced once.
"""

import contextlib
import threading
import weakref

import keras

_STATE = threading.local()
_FUNCTIONS = weakref.WeakKeyDictionary()  # first block of a configuration -> {(signature, method): its function}


@contextlib.contextmanager
def sharing():
    """Within it, `call_block` and `apply_block` trace each configuration
    of block once (TensorFlow graphs only)."""
    depth = getattr(_STATE, "depth", 0)
    _STATE.depth = depth + 1
    try:
        yield
    finally:
        _STATE.depth = depth


def call_block(blocks, index, *args, **kwargs):
    """`blocks[index].call(*args, **kwargs)`, through the trace its
    configuration shares within `sharing()` in a TensorFlow graph."""
    shared = _shared(blocks, index, "call")
    return blocks[index].call(*args, **kwargs) if shared is None else shared(*args, **kwargs)


def apply_block(blocks, index, *args, **kwargs):
    """`blocks[index](*args, **kwargs)` (the layer's `__call__`), through
    the trace its configuration shares within `sharing()` in a TensorFlow
    graph."""
    shared = _shared(blocks, index, "__call__")
    return blocks[index](*args, **kwargs) if shared is None else shared(*args, **kwargs)


def _shared(blocks, index, method):
    """The shared trace of `blocks[index]`'s `method`, bound to its
    variables' values, or None where blocks are not shared."""
    if not getattr(_STATE, "depth", 0) or keras.config.backend() != "tensorflow":
        return None
    import tensorflow as tf

    if not tf.inside_function():
        return None
    block = blocks[index]
    signature = _signature(block)
    first = next(b for b in blocks[: index + 1] if _signature(b) == signature)
    functions = _FUNCTIONS.setdefault(first, {})
    function = functions.get((signature, method))
    if function is None:
        function = functions[(signature, method)] = tf.function(
            _BlockCall(first, method), autograph=False, experimental_attributes={"_noinline": True}
        )
    # Values, not the variables: a variable would reach XLA as a resource
    # argument named after it, and the bridge would convert the body again
    # for each block.
    values = [tf.convert_to_tensor(variable.value) for variable in block.variables]
    return lambda *args, **kwargs: function(values, *args, **kwargs)


def _signature(block):
    config = dict(block.get_config())
    config.pop("name", None)
    variables = tuple((v.name, tuple(v.shape), str(v.dtype)) for v in block.variables)
    return repr((type(block).__qualname__, sorted(config.items()), variables))


class _BlockCall:
    """The shared function's body: `first`'s `method` reading the
    variables' values it is given. A callable object holding `first`
    weakly, so that the function kept for a block does not keep the block
    alive."""

    def __init__(self, first, method):
        self.first, self.method = weakref.ref(first), method

    def __call__(self, values, *args, **kwargs):
        first = self.first()
        with keras.StatelessScope(state_mapping=list(zip(first.variables, values))):
            return getattr(first, self.method)(*args, **kwargs)
