"""Masks (and training mode) broken on purpose: each mutation must make the
mask tests (or the training-mode tests) fail.

A wrong mask fails silently - the model still trains - so the fuzz tests
(tests/fuzz) and the attention invariants (no future leak, padding changes
nothing, cached == full, rows with no key give 0) are the only guard. This
package shows that they guard: each mutation below breaks one mask path of
the current code by monkeypatching a public function of `zoo.layers`
(`merge_masks`, `attention_weights`, `fused_attention`) in every zoo module
that holds it, then runs those tests, which must fail.

    make mutate                                  # every mutation, a summary table
    python -m tests.mutations causal_mask_dropped   # one, with pytest's output

One more mutation breaks training mode instead of a mask: a model whose
`call` hides its `training` argument from Keras trains with every dropout
layer off, and tests/models/test_training_mode.py must fail.

Two controls run first and must pass: the unmodified code, and the
re-implementation of attention the weight mutations patch in, unbroken
(so a failure comes from the breakage, not from the re-implementation).
Nothing here runs in the default `pytest` run (the folder holds no
test_*.py); the source files are never modified.
"""

import inspect
import math
import sys

from keras import ops

# The tests that must catch a broken mask: the fuzz tests, and the
# invariant tests of tests/layers/test_attention.py.
SUITE = ["tests/fuzz", "tests/layers/test_attention.py"]
SELECT = (
    "fuzz or matches_reference or no_future_leak or exactly_zero_above or padded_key or fully_masked "
    "or cached or implicit_keras_mask"
)
# The tests that must catch a model that never passes `training` on.
TRAINING_SUITE = ["tests/models/test_training_mode.py"]


def _patch_everywhere(name, new):
    """Replace `zoo.layers.attention.<name>` in every loaded zoo module that
    imported it (`from zoo.layers.attention import name` copies the name)."""
    import zoo  # noqa: F401  (loads the layers, models and generation)
    import zoo.generation  # noqa: F401
    import zoo.layers.attention as attention
    import zoo.models  # noqa: F401

    original = getattr(attention, name)
    patched = []
    for module_name, module in list(sys.modules.items()):
        if (module_name == "zoo" or module_name.startswith("zoo.")) and getattr(module, name, None) is original:
            setattr(module, name, new)
            patched.append(module_name)
    assert patched, f"no zoo module holds {name}"
    return original


def _with_arguments(name, change):
    """Patch `name` with a wrapper that calls the original with its bound
    arguments changed by `change(arguments)` (a dict, edited in place)."""
    import zoo.layers.attention as attention

    original = getattr(attention, name)
    signature = inspect.signature(original)

    def wrapper(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        change(bound.arguments)
        return original(*bound.args, **bound.kwargs)

    _patch_everywhere(name, wrapper)


# --- A re-implementation of attention whose pieces the mutations break ----


def _weights(query, key, mask=None, scale=None, masked_logit=-1e9, zero_empty_rows=True, bias=None):
    """softmax(Q K^T * scale + bias) over the allowed keys, as `attention_weights`."""
    if scale is None:
        scale = 1.0 / math.sqrt(key.shape[-1])
    logits = ops.cast(ops.matmul(query, ops.swapaxes(key, -1, -2)), "float32") * scale
    if bias is not None:
        logits = logits + ops.cast(bias, "float32")
    if mask is None:
        return ops.cast(ops.softmax(logits, axis=-1), query.dtype)
    mask = ops.cast(mask, "bool")
    weights = ops.softmax(ops.where(mask, logits, masked_logit), axis=-1)
    if zero_empty_rows:
        weights = ops.where(ops.any(mask, axis=-1, keepdims=True), weights, 0.0)
    return ops.cast(weights, query.dtype)


def _causal(query, key, offset=0):
    """(1, 1, T, S) bool: key s <= query t + offset."""
    t, s = query.shape[1], key.shape[1]
    return ops.expand_dims(ops.arange(s)[None, :] <= ops.arange(t)[:, None] + offset, (0, 1))


def _fused(query, key, value, mask=None, scale=None, is_causal=False, causal_offset=0, **weight_options):
    """`fused_attention` in its (B, T, h, k) layout, through `_weights`."""
    if is_causal:
        mask = _causal(query, key, causal_offset)
    q, k, v = (ops.transpose(x, (0, 2, 1, 3)) for x in (query, key, value))  # (B, h, T|S, k)
    out = ops.matmul(_weights(q, k, mask, scale, **weight_options), ops.cast(v, q.dtype))  # (B, h, T, k)
    return ops.transpose(out, (0, 2, 1, 3))  # (B, T, h, k)


def _reimplemented(**weight_options):
    def weights(query, key, mask=None, scale=None, bias=None):
        return _weights(query, key, mask, scale, bias=bias, **weight_options)

    def fused(query, key, value, mask=None, scale=None, is_causal=False):
        return _fused(query, key, value, mask, scale, is_causal, **weight_options)

    _patch_everywhere("attention_weights", weights)
    _patch_everywhere("fused_attention", fused)


# --- The mutations -------------------------------------------------------------


def _drop(*names):
    def change(arguments):
        for name in names:
            arguments[name] = False if name == "use_causal_mask" else None

    return change


def padding_mask_dropped():
    _with_arguments("merge_masks", _drop("padding_mask"))


def attention_mask_dropped():
    _with_arguments("merge_masks", _drop("attention_mask"))


def causal_mask_dropped():
    _with_arguments("merge_masks", _drop("use_causal_mask"))
    _with_arguments("fused_attention", lambda a: a.update(is_causal=False))


def causal_mask_leaks_one_step():
    def later_start(arguments):
        arguments["query_start"] = arguments["query_start"] + 1  # key s <= t + 1

    _with_arguments("merge_masks", later_start)

    def fused(query, key, value, mask=None, scale=None, is_causal=False):
        return _fused(query, key, value, mask, scale, is_causal, causal_offset=1)

    _patch_everywhere("fused_attention", fused)


def cache_index_ignored():
    _with_arguments("merge_masks", lambda a: a.update(query_start=0))  # every cached step is "position 0"


def keras_masks_dropped():
    _with_arguments("merge_masks", _drop("query_mask", "key_mask"))


def padding_masks_the_queries():
    """The padding mask applied along the query axis instead of the keys."""

    def change(arguments):
        padding = arguments["padding_mask"]
        if padding is not None and arguments["query"].shape[1] == arguments["key"].shape[1]:
            arguments["padding_mask"] = None
            query_mask = arguments["query_mask"]
            arguments["query_mask"] = padding if query_mask is None else ops.logical_and(
                ops.cast(query_mask, "bool"), ops.cast(padding, "bool"))

    _with_arguments("merge_masks", change)


def empty_rows_not_zeroed():
    """Keras' default: a query with no key left attends uniformly to all."""
    _reimplemented(zero_empty_rows=False)


def nan_on_empty_rows():
    _reimplemented(masked_logit=-math.inf, zero_empty_rows=False)


def masked_logit_too_small():
    """A masked key gets logit -1 instead of -1e9: it keeps some weight."""
    _reimplemented(masked_logit=-1.0)


def training_hidden_from_keras():
    """`ZooModel.call` without a `training` argument in its signature:
    Keras then never passes it, and no dropout layer runs in `fit`."""
    from zoo.models.base import ZooModel

    def call(self, inputs, *args, **kwargs):
        return super(ZooModel, self).call(self._with_optional_inputs(inputs), *args, **kwargs)

    ZooModel.call = call


def control_unmodified():
    pass


def control_reimplemented():
    _reimplemented()


CONTROLS = {"control_unmodified": control_unmodified, "control_reimplemented": control_reimplemented}
MUTATIONS = {
    f.__name__: f
    for f in (
        padding_mask_dropped,
        attention_mask_dropped,
        causal_mask_dropped,
        causal_mask_leaks_one_step,
        cache_index_ignored,
        keras_masks_dropped,
        padding_masks_the_queries,
        empty_rows_not_zeroed,
        nan_on_empty_rows,
        masked_logit_too_small,
        training_hidden_from_keras,
    )
}
TRAINING_MUTATIONS = {"training_hidden_from_keras"}


def suite(name):
    """(test paths, -k expression) that must catch mutation `name`; a
    control runs every suite."""
    if name in CONTROLS:
        return [*SUITE, *TRAINING_SUITE], f"({SELECT}) or test_training_mode"
    if name in TRAINING_MUTATIONS:
        return TRAINING_SUITE, ""
    return SUITE, SELECT
