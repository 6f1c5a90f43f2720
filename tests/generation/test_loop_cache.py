"""The decoding loop's form of the key/value cache (`loop_cache`).

At batch 1 the loop carries each (1, g, S, k) cache tensor as (g, S, k),
the form the attention product reads without a reshape. The attention
takes a (B g, S, k) cache as well as a (B, g, S, k) one and gives back
the form it got, with the same outputs; a generation gives the same
tokens and probabilities with the loop's form as without it; and the
compiled loop writes each step into the cache in place, at batch 1 and
more: no instruction of its body copies a cache-sized buffer.
"""

import re

import keras
import numpy as np
import pytest

import zoo
from zoo import generate
from zoo.generation import compiled
from zoo.layers import MultiHeadAttention
from zoo.layers.multi_head_attention import merge_rows
from zoo.models.causal_lm import CausalLM
from zoo.models.decoder_stack import DecoderStack
from zoo.models.transformer.model import EncoderDecoder

B, G, HEADS, S, K = 3, 2, 4, 12, 4


def _attention():
    keras.utils.set_random_seed(1)
    layer = MultiHeadAttention(num_heads=HEADS, num_key_value_heads=G, head_dim=K)
    layer.build((B, 1, 16))
    return layer


@pytest.mark.parametrize("new,per_row", [(1, False), (3, False), (1, True), (2, True)],
                         ids=["step", "positions", "a step per row", "positions per row"])
def test_the_attention_takes_either_form_and_returns_the_one_given(new, per_row):
    layer = _attention()
    rng = np.random.default_rng(new)
    query = rng.normal(size=(B, new, 16)).astype("float32")
    cache = tuple(rng.normal(size=(B, G, S, K)).astype("float32") for _ in range(2))
    index = np.array([2, 5, 7], "int32") if per_row else 4
    out, written = layer(query, cache=cache, cache_index=index)
    merged = tuple(c.reshape(B * G, S, K) for c in cache)
    merged_out, merged_written = layer(query, cache=merged, cache_index=index)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(merged_out), keras.ops.convert_to_numpy(out),
                               rtol=1e-5, atol=1e-6)
    for four, three in zip(written, merged_written):
        assert tuple(three.shape) == (B * G, S, K)
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(three),
                                      keras.ops.convert_to_numpy(four).reshape(B * G, S, K))
    # The new positions are written where each row's index says, the rest kept.
    four = keras.ops.convert_to_numpy(written[0])
    starts = index if per_row else [index] * B
    for b, start in enumerate(starts):
        kept = np.ones(S, bool)
        kept[start:start + new] = False
        np.testing.assert_array_equal(four[b][:, kept], cache[0][b][:, kept])
        assert not np.allclose(four[b][:, ~kept], cache[0][b][:, ~kept])


def test_merge_rows_merges_a_cache_of_one_row_and_keeps_any_other_tensor():
    cache = ((np.zeros((1, 3, 5, 4)), np.zeros((2, 3, 5, 4))), np.zeros((1, 5)))
    merged = merge_rows(cache)
    assert [tuple(x.shape) for x in keras.tree.flatten(merged)] == [(3, 5, 4), (2, 3, 5, 4), (1, 5)]


def _model(preset, **kwargs):
    keras.utils.set_random_seed(3)
    model = zoo.build(preset, **kwargs)
    rng = np.random.default_rng(3)
    for w in model.weights:
        if "norm" not in w.path:
            w.assign(rng.normal(0.0, 0.3, w.shape).astype(w.dtype))
    return model


@pytest.mark.parametrize("preset,kwargs,owner", [("llama-nano", {}, CausalLM),
                                                 ("transformer-tiny", {}, EncoderDecoder)])
def test_a_generation_is_the_same_without_the_loop_form(preset, kwargs, owner, monkeypatch):
    model = _model(preset, **kwargs)
    prompts = [[5, 17, 42, 8]]  # one row: the loop's form is for a batch of one
    source = {"source": [[4, 5, 6]]} if model.is_encoder_decoder else {}
    settings = dict(sampler="top_k", top_k=5, seed=7, logprobs=0, **source)
    with_form = generate(model, prompts, 6, **settings)
    monkeypatch.delattr(owner, "loop_cache")
    monkeypatch.delattr(DecoderStack, "loop_cache", raising=False)
    compiled._COMPILED.pop(model, None)
    without = generate(model, prompts, 6, **settings)
    assert with_form.sequences == without.sequences
    np.testing.assert_allclose(np.concatenate(with_form.token_logprobs), np.concatenate(without.token_logprobs),
                               atol=1e-5)


@pytest.mark.skipif(keras.config.backend() != "jax", reason="reads the program XLA compiled on JAX")
@pytest.mark.parametrize("batch", [1, 2])
def test_the_compiled_loop_copies_no_cache(batch):
    model = _model("llama-nano", task="causal_lm")
    prompts = [[5 + row, 17, 42, 8] for row in range(batch)]
    generate(model, prompts, 8)
    function = list(compiled._COMPILED[model].values())[-1]
    calls = []
    jitted = function.compiled
    function.compiled = lambda *args: calls.append(args) or jitted(*args)
    generate(model, [[p + 1 for p in prompt] for prompt in prompts], 8)  # the same shapes: the same function
    text = jitted.lower(*calls[0]).compile().as_text()
    bodies = re.findall(r"while\(.*?body=%?([\w.\-]+)", text)
    assert bodies, "no while loop in the compiled generation"
    cache_sizes = {batch * 2 * length * 8 for length in (16, 32, 64)}  # (B, g, S, k) elements at each stage's length
    for body in bodies:
        computation = re.search(rf"^%?{re.escape(body)} .*?\n}}", text, re.S | re.M).group(0)
        copies = []
        for line in computation.splitlines()[1:]:
            match = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = f32\[([\d,]*)\]", line)
            if match and "copy" in match.group(1) and match.group(2):
                if int(np.prod([int(d) for d in match.group(2).split(",")])) in cache_sizes:
                    copies.append(line.strip()[:160])
        assert not copies, copies
