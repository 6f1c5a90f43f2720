"""Continuous batching in slots (`zoo.generation.slots`).

The cached step at per-row positions (a (B,) `cache_index`) gives each row
what it gives the row alone, on GPT (learned positions), Llama (rotary)
and Gemma 3 (rotary, a sliding-window layer); its pieces against float64
NumPy. Requests joining the slots at different steps, with chunked
prefill, get `zoo.generate`'s tokens (greedy, seeded samplers, controls);
a cancelled request frees its slot at once; a prefill from the prefix
cache gives the logits of a fresh one; the cache holds its bound.
"""

import keras
import numpy as np
import pytest

import zoo
from zoo.generation import Decoding
from zoo.generation.slots import LENGTH, STOP, PrefixCache, Slots
from zoo.layers.attention import merge_masks
from zoo.layers.multi_head_attention import _write_rows
from zoo.layers.rotary_embedding import RotaryEmbedding

SIZES = {"gemma3-nano": dict(num_layers=2, layer_types=["sliding_attention", "full_attention"], sliding_window=4)}
SETTINGS = [
    None,
    dict(sampler="top_p", top_p=0.9, seed=3),
    dict(sampler="temperature", temperature=1.2, seed=7),
    dict(sampler="top_k", top_k=5, seed=1),
]


@pytest.fixture(scope="module", params=["gpt-nano", "llama-nano", "gemma3-nano"])
def lm(request):
    keras.utils.set_random_seed(0)
    return zoo.build(request.param, "causal_lm", max_sequence_length=32, **SIZES.get(request.param, {}))


def _prompts(lm, lengths, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(1, lm.vocabulary_size, n).tolist() for n in lengths]


# --- The cached step at per-row positions ---------------------------------------------------


def test_rows_at_their_own_positions_equal_each_row_alone(lm):
    prompts = _prompts(lm, (3, 7, 12))
    alone, before = [], []
    for prompt in prompts:
        logits, _ = lm.call_with_cache(np.array([prompt], "int32"), lm.empty_cache(1, 32), 0)
        alone.append(keras.ops.convert_to_numpy(logits)[0, -1])
        _, cache = lm.call_with_cache(np.array([prompt[:-1]], "int32"), lm.empty_cache(1, 32), 0)
        before.append(cache)
    cache = keras.tree.map_structure(lambda *rows: keras.ops.concatenate(rows, axis=0), *before)
    last = np.array([[prompt[-1]] for prompt in prompts], "int32")
    index = np.array([len(prompt) - 1 for prompt in prompts], "int32")
    logits, cache = lm.call_with_cache(last, cache, index)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(logits)[:, 0], np.stack(alone), atol=2e-5)
    # A scalar index at equal positions is the same step.
    same = np.array([6, 6, 6], "int32")
    by_rows, _ = lm.call_with_cache(last, cache, same)
    by_scalar, _ = lm.call_with_cache(last, cache, 6)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(by_rows), keras.ops.convert_to_numpy(by_scalar), atol=1e-6)


def test_per_row_cache_write_and_mask_against_numpy():
    rng = np.random.default_rng(1)
    cache = rng.normal(size=(3, 2, 10, 4))  # (B, g, S, k) keys
    new = rng.normal(size=(3, 2, 3, 4))
    index = np.array([0, 4, 7], "int32")
    expected = cache.copy()
    for b, i in enumerate(index):
        expected[b, :, i:i + 3] = new[b]
    np.testing.assert_allclose(keras.ops.convert_to_numpy(_write_rows(cache, new, index)), expected)
    expected_one = cache.copy()
    for b, i in enumerate(index):
        expected_one[b, :, i] = new[b, :, 0]
    np.testing.assert_allclose(keras.ops.convert_to_numpy(_write_rows(cache, new[:, :, :1], index)), expected_one)

    mask = keras.ops.convert_to_numpy(merge_masks(np.zeros((3, 2, 4)), np.zeros((3, 10, 4)), use_causal_mask=True,
                                                  query_start=index, sliding_window=3))
    query = index[:, None, None] + np.arange(2)[None, :, None]  # (B, T, 1)
    key = np.arange(10)[None, None, :]
    np.testing.assert_array_equal(mask, (key <= query) & (key > query - 3))


def test_per_row_rotary_against_numpy():
    rotary = RotaryEmbedding(8, 10000.0)
    rotary.build((None, None, None, 8))
    x = np.random.default_rng(2).normal(size=(2, 3, 1, 8))
    start = np.array([0, 5], "int32")
    out = keras.ops.convert_to_numpy(rotary(x.astype("float32"), start_index=start))
    inverse = 10000.0 ** (-np.arange(0, 8, 2) / 8)
    for b in range(2):
        angles = (start[b] + np.arange(3))[:, None] * inverse[None]  # (T, k/2), float64
        first, second = x[b, :, 0, :4], x[b, :, 0, 4:]
        want = np.concatenate([first * np.cos(angles) - second * np.sin(angles),
                               second * np.cos(angles) + first * np.sin(angles)], axis=-1)
        np.testing.assert_allclose(out[b, :, 0], want, atol=1e-5)


# --- Slots -------------------------------------------------------------------------------------


def test_requests_joining_at_different_steps_get_generates_tokens(lm):
    prompts = _prompts(lm, (1, 12, 5, 18))  # a one-token prompt needs no prefill
    budgets = [12, 7, 10, 9]
    controls = [None, None, dict(repetition_penalty=1.5), None]
    joins = {0: 0, 2: 1, 3: 2, 5: 3}  # step -> request
    if type(lm).__name__ != "GPTCausalLM":  # every sampler on GPT; greedy and top-p elsewhere (compile time)
        prompts, budgets, controls, joins = prompts[:2], budgets[:2], controls[:2], {0: 0, 2: 1}
    expected = [Decoding(lm, [p], b, s, controls=c).run().new_tokens[0]
                for p, b, s, c in zip(prompts, budgets, SETTINGS, controls)]
    slots = Slots(lm, max_batch=2, prefill_chunk=4)
    requests, step = [], 0
    while step <= max(joins) or slots.busy:
        if step in joins:
            i = joins[step]
            requests.append(slots.add(prompts[i], budgets[i], SETTINGS[i], controls[i]))
        slots.step()
        assert slots.in_use <= 2
        step += 1
    for request, want in zip(requests, expected):
        assert request.new_tokens == want
        assert request.finish_reason == LENGTH


def test_a_stop_token_and_a_cancellation_free_the_slot_at_once(lm):
    first, second, third = _prompts(lm, (4, 6, 5), seed=3)
    greedy = Decoding(lm, [first], 10).run().new_tokens[0]
    slots = Slots(lm, max_batch=1, stop_token_ids=[greedy[2]])
    stopped = slots.add(first, 10)
    while not stopped.finished:
        slots.step()
    assert stopped.new_tokens == greedy[: greedy.index(greedy[2]) + 1] and stopped.finish_reason == STOP
    assert slots.in_use == 0
    long = slots.add(second, 20)
    waiting = slots.add(third, 3)
    slots.step()
    assert long.slot == 0 and waiting.slot is None
    slots.finish(long)  # the client went away
    assert slots.in_use == 0
    slots.step()
    assert waiting.slot == 0 and len(waiting.new_tokens) == 1
    assert len(long.new_tokens) == 1 and long.finish_reason == STOP


def test_a_cached_prefill_gives_a_fresh_prefills_logits(lm):
    shared = _prompts(lm, (13,), seed=4)[0]
    prompt = shared + _prompts(lm, (6,), seed=5)[0]
    slots = Slots(lm, max_batch=2, prefix_cache_tokens=64, block_tokens=4, prefill_chunk=4)
    warm = slots.add(shared + [7], 2)
    while slots.busy:
        slots.step()
    assert warm.cached_tokens == 0 and slots.prefix_cache.tokens == 12
    request = slots.add(prompt, 4)
    slots._prefill()
    while not slots._ready(request):
        slots._prefill()
    assert request.cached_tokens == 12
    n = len(prompt)
    cached, _ = lm.call_with_cache(np.array([prompt[-1:]], "int32"), request.cache, n - 1)
    fresh, _ = lm.call_with_cache(np.array([prompt], "int32"), lm.empty_cache(1, 32), 0)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(cached)[0, 0], keras.ops.convert_to_numpy(fresh)[0, -1],
                               atol=2e-5)
    while slots.busy:
        slots.step()
    assert request.new_tokens == Decoding(lm, [prompt], 4).run().new_tokens[0]


def test_the_prefix_cache_keeps_its_bound_least_recently_used_out():
    cache = PrefixCache(block_tokens=2, capacity_tokens=4)
    layers = tuple(np.arange(1 * 8 * 3, dtype="float32").reshape(1, 1, 8, 3) + i for i in range(2))  # keys, values
    cache.store([1, 2, 3, 4, 5], layers)  # blocks [1, 2] and [1, 2][3, 4]
    assert cache.tokens == 4 and len(cache.lookup([1, 2, 3, 4, 9])) == 2
    for held, layer in zip(cache.lookup([1, 2])[0], layers):
        np.testing.assert_array_equal(held, layer[0, :, 0:2])
    cache.store([9, 9, 1, 2], layers)  # a new first block pushes out the least recently used
    assert cache.tokens == 4
    assert len(cache.lookup([9, 9, 1, 2])) == 2 and len(cache.lookup([1, 2, 3, 4])) == 0
    assert len(cache.keys([1, 2, 3])) == 1 and cache.keys([1, 2])[0] != cache.keys([2, 1])[0]


def test_slots_refuse_what_they_cannot_decode(lm):
    slots = Slots(lm, max_batch=2)
    with pytest.raises(ValueError, match="window of 32 positions"):
        slots.add(list(range(1, 20)), 20)
    with pytest.raises(ValueError, match="`max_batch` must be an integer >= 1"):
        Slots(lm, max_batch=0)
