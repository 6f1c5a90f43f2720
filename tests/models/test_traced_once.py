"""A stack's blocks traced once into a TensorFlow graph (`zoo.traced_once`):
the cached step computes what the blocks traced one by one compute, each
block with its own weights, and the graph holds one traced function per
configuration of block, called once per block."""

import contextlib

import keras
import numpy as np
import pytest

import zoo
from zoo import traced_once
from zoo.layers import DecoderBlock

pytestmark = pytest.mark.skipif(keras.config.backend() != "tensorflow",
                                reason="the blocks' shared trace is a TensorFlow graph's")


def _traced(function, *specs, shared):
    """`function` traced for XLA, with or without `traced_once.sharing()`."""
    import tensorflow as tf

    compiled = tf.function(function, jit_compile=True, autograph=False)
    with traced_once.sharing() if shared else contextlib.nullcontext():
        return compiled.get_concrete_function(*specs)


def _block_calls(concrete):
    """{function name: call sites} of the `_noinline` functions the graph
    calls."""
    library = {f.signature.name: f for f in concrete.graph.as_graph_def().library.function}
    calls = {}
    for op in concrete.graph.get_operations():
        if op.type in ("PartitionedCall", "StatefulPartitionedCall"):
            name = op.get_attr("f").name
            if library[name].attr["_noinline"].b:
                calls[name] = calls.get(name, 0) + 1
    return calls


def _cached_steps(model):
    """A prefill of 4 tokens and one step at position 4: both logits and the cache."""
    import tensorflow as tf

    def steps(ids):
        cache = model.empty_cache(2, 8)
        prefill, cache = model.call_with_cache(ids, cache, 0)
        step, cache = model.call_with_cache(ids[:, :1], cache, tf.constant(4))
        return prefill, step, cache

    return steps


def _assert_shared_equals_unshared(model, function, specs, arrays, blocks, configurations):
    shared = _traced(function, *specs, shared=True)
    unshared = _traced(function, *specs, shared=False)
    assert _block_calls(unshared) == {}
    calls = _block_calls(shared)
    assert sorted(calls.values()) == sorted(configurations), calls
    for got, want in zip(keras.tree.flatten(shared(*arrays)), keras.tree.flatten(unshared(*arrays))):
        np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-5, rtol=1e-5)
    assert sum(configurations) == blocks


@pytest.mark.parametrize("name", ["gpt-nano", "llama-nano"])
def test_decoder_only_blocks_share_one_trace(name):
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    model = zoo.build(name, task="causal_lm", vocabulary_size=40)
    ids = np.random.default_rng(0).integers(1, 40, (2, 4)).astype("int32")
    blocks = len(model.backbone.blocks)
    assert blocks > 1
    # Each prefill and each step is one configuration's calls: one trace of
    # each shape, called once per block.
    _assert_shared_equals_unshared(model, _cached_steps(model), [tf.TensorSpec((2, 4), tf.int32)], [ids], 2 * blocks,
                                   [blocks, blocks])


def test_local_and_global_blocks_are_traced_apart():
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    model = zoo.build("gemma3-nano", task="causal_lm", vocabulary_size=40,
                      layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
                      num_layers=4)
    ids = np.random.default_rng(1).integers(1, 40, (2, 4)).astype("int32")
    # Two kinds of block, each traced for the prefill and the step, each
    # trace called by its 2 blocks.
    _assert_shared_equals_unshared(model, _cached_steps(model), [tf.TensorSpec((2, 4), tf.int32)], [ids], 8,
                                   [2, 2, 2, 2])


def test_quantized_blocks_share_one_trace():
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    model = zoo.build("llama-nano", task="causal_lm", vocabulary_size=40)
    model.quantize("int8")
    ids = np.random.default_rng(2).integers(1, 40, (2, 4)).astype("int32")
    blocks = len(model.backbone.blocks)
    _assert_shared_equals_unshared(model, _cached_steps(model), [tf.TensorSpec((2, 4), tf.int32)], [ids], 2 * blocks,
                                   [blocks, blocks])


def test_encoder_decoder_blocks_share_one_trace():
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    model = zoo.build("transformer-tiny", vocabulary_size=40)
    rng = np.random.default_rng(3)
    source = rng.integers(1, 40, (2, 6)).astype("int32")
    source_mask = np.array([[1] * 6, [1] * 4 + [0] * 2], "int32")
    target = rng.integers(1, 40, (2, 4)).astype("int32")

    def steps(source, source_mask, target):
        context = model.start(source, source_mask)
        cache = model.empty_cache(2, 8)
        prefill, cache = model.call_with_cache(target, cache, 0, context)
        step, cache = model.call_with_cache(target[:, :1], cache, tf.constant(4), context)
        return prefill, step, cache

    specs = [tf.TensorSpec((2, 6), tf.int32), tf.TensorSpec((2, 6), tf.int32), tf.TensorSpec((2, 4), tf.int32)]
    blocks, encoder_blocks = len(model.decoder_blocks), len(model.encoder_blocks)
    # The encoder's blocks (through `__call__`), the decoder's prefill and step.
    _assert_shared_equals_unshared(model, steps, specs, [source, source_mask, target], encoder_blocks + 2 * blocks,
                                   [encoder_blocks, blocks, blocks])


def test_each_configuration_of_block_is_traced_once():
    """Blocks of other configurations in one list: each call goes through
    the trace of the first block with its configuration, with its own
    weights."""
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    blocks = [DecoderBlock(num_heads=2, intermediate_dim=16, activation=activation, name=f"block_{i}")
              for i, activation in enumerate(["relu", "gelu", "relu", "gelu", "relu"])]
    x = np.random.default_rng(4).normal(size=(2, 3, 8)).astype("float32")
    for block in blocks:
        block(x)

    def stack(x):
        outputs = []
        for i in range(len(blocks)):
            outputs.append(traced_once.call_block(blocks, i, x, training=False))
        return outputs

    _assert_shared_equals_unshared(None, stack, [tf.TensorSpec(x.shape, tf.float32)], [x], 5, [3, 2])
    direct = [block.call(x, training=False).numpy() for block in blocks]
    assert not np.allclose(direct[0], direct[2])  # the blocks' own weights, not the first's
    for got, want in zip(_traced(stack, tf.TensorSpec(x.shape, tf.float32), shared=True)(x), direct):
        np.testing.assert_allclose(got.numpy(), want, atol=1e-5, rtol=1e-5)


def test_outside_a_graph_each_block_calls_itself():
    keras.utils.set_random_seed(0)
    blocks = [DecoderBlock(num_heads=2, intermediate_dim=16, name=f"block_{i}") for i in range(2)]
    x = np.random.default_rng(5).normal(size=(1, 3, 8)).astype("float32")
    for block in blocks:
        block(x)
    with traced_once.sharing():
        eager = traced_once.call_block(blocks, 1, x, training=False)
    np.testing.assert_allclose(eager.numpy(), blocks[1].call(x, training=False).numpy(), atol=1e-6)


def test_generation_traces_each_block_configuration_once():
    """`zoo.generate` on TensorFlow: the compiled loop calls one trace of
    the blocks per shape, and its tokens are those of the blocks traced one
    by one."""
    keras.utils.set_random_seed(0)
    model = zoo.build("llama-nano", task="causal_lm", vocabulary_size=40)
    prompts = [[5, 7, 9], [3, 4]]
    shared = zoo.generate(model, prompts, max_new_tokens=6)
    from zoo.generation import compiled

    (function,) = compiled._COMPILED[model].values()
    (concrete,) = [c for c in function.called.values()]
    calls = _block_calls(concrete)
    blocks = len(model.backbone.blocks)
    assert list(calls.values()) == [blocks]  # the prefill's; the step's are in the loop's body
    original = traced_once.sharing
    try:
        traced_once.sharing = contextlib.nullcontext
        compiled._COMPILED.pop(model)
        unshared = zoo.generate(model, prompts, max_new_tokens=6)
    finally:
        traced_once.sharing = original
    np.testing.assert_array_equal(shared.token_ids, unshared.token_ids)
