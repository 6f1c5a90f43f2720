"""Encoder-decoders in slots (`zoo.generation.slots.Slots` with sources).

The encoder-decoder's cached step at per-row positions (a (B,) `cache_index`)
gives each row what it gives the row alone, on the paper's Transformer
(sinusoidal positions), a Marian-like model (sines then cosines), a
BART-like one (learned positions at an offset) and a T5-like one (relative
position buckets); T5's per-row bias against float64 NumPy. Requests with
sources of different lengths joining the slots at different steps get
`zoo.generate`'s tokens (greedy, seeded samplers, controls; the slots'
source length grows while one decodes); a cancelled request frees its slot
at once and the next one reads none of its context.
"""

import keras
import numpy as np
import pytest

import zoo
from tests.models.test_transformer_t5_flags import bucket
from zoo.generation.prompts import right_pad
from zoo.generation.slots import LENGTH, STOP, Slots
from zoo.layers import RelativePositionBias

WINDOW = 32
# Each family's decoder start, as its checkpoints' generation configs give it: the recipes' [START]; Marian's
# <pad>, never chosen again; BART's </s> then its forced <s>; T5's <pad>.
START = {"transformer-tiny": ([1], ()), "opus-mt-tiny": ([0], (0,)), "bart-tiny": ([2, 0], ()), "t5-tiny": ([0], ())}
SETTINGS = [
    None,
    dict(sampler="top_p", top_p=0.9, seed=3),
    dict(sampler="temperature", temperature=1.2, seed=7),
    dict(sampler="top_k", top_k=5, seed=1),
]


@pytest.fixture(scope="module", params=list(START))
def seq2seq(request):
    keras.utils.set_random_seed(0)
    return request.param, zoo.build(request.param, max_sequence_length=WINDOW)


def _ids(size, lengths, seed):
    rng = np.random.default_rng(seed)
    return [rng.integers(3, size, n).tolist() for n in lengths]


# --- The cached step at per-row positions ---------------------------------------------------


def test_rows_at_their_own_positions_equal_each_row_alone(seq2seq):
    _, model = seq2seq
    sources = _ids(model.source_vocabulary_size, (4, 9, 6), seed=1)
    targets = _ids(model.vocabulary_size, (2, 7, 11), seed=2)
    alone, caches = [], []
    for source, target in zip(sources, targets):
        own = model.start(np.array([source], "int32"), np.ones((1, len(source)), bool))  # its source alone, unpadded
        logits, _ = model.call_with_cache(np.array([target], "int32"), model.empty_cache(1, 16), 0, own)
        alone.append(keras.ops.convert_to_numpy(logits)[0, -1])
        _, cache = model.call_with_cache(np.array([target[:-1]], "int32"), model.empty_cache(1, 16), 0, own)
        caches.append(cache)
    context = model.start(*right_pad(sources, 9, 0))  # the sources side by side, right-padded
    cache = keras.tree.map_structure(lambda *rows: keras.ops.concatenate(rows, axis=0), *caches)
    last = np.array([[target[-1]] for target in targets], "int32")
    index = np.array([len(target) - 1 for target in targets], "int32")
    logits, _ = model.call_with_cache(last, cache, index, context)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(logits)[:, 0], np.stack(alone), rtol=1e-4, atol=1e-4)
    # A per-row index at equal positions is the scalar index's step.
    by_rows, _ = model.call_with_cache(last, cache, np.array([6, 6, 6], "int32"), context)
    by_scalar, _ = model.call_with_cache(last, cache, 6, context)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(by_rows), keras.ops.convert_to_numpy(by_scalar), atol=1e-5)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_per_row_relative_position_bias_against_numpy(bidirectional):
    layer = RelativePositionBias(num_heads=3, num_buckets=8, max_distance=16, bidirectional=bidirectional)
    x = np.zeros((3, 2, 4), "float32")  # (B, T, d): two queries a row
    layer.build(x.shape)
    table = np.random.default_rng(0).normal(size=(8, 3))
    layer.embeddings.assign(table.astype("float32"))
    start = np.array([0, 3, 19], "int32")
    bias = np.asarray(keras.ops.convert_to_numpy(layer(x, key_length=24, start_index=start)), np.float64)
    assert bias.shape == (3, 3, 2, 24)
    want = np.empty((3, 3, 2, 24))
    for b, first in enumerate(start):
        for t in range(2):
            for s in range(24):
                want[b, :, t, s] = table[bucket(s - (first + t), bidirectional, 8, 16)]
    np.testing.assert_allclose(bias, want, rtol=1e-6)
    for b, first in enumerate(start):  # each row is the scalar start's bias
        alone = keras.ops.convert_to_numpy(layer(x[:1], key_length=24, start_index=int(first)))
        np.testing.assert_array_equal(bias[b], alone[0])


# --- Slots ---------------------------------------------------------------------------------


@pytest.mark.integration  # compiles zoo.generate's programs and the slots' for each model
def test_requests_joining_at_different_steps_get_generates_tokens(seq2seq):
    name, model = seq2seq
    prompt, suppressed = START[name]
    sources = _ids(model.source_vocabulary_size, (3, 20, 7, 12), seed=3)  # 20 grows the slots' source to 32
    budgets = [12, 7, 10, 9]
    controls = [None, None, dict(repetition_penalty=1.5), None]
    joins = {0: 0, 2: 1, 3: 2, 5: 3}  # step -> request
    if name != "transformer-tiny":  # every sampler on the paper's model; greedy and top-p elsewhere (compile time)
        sources, budgets, controls, joins = sources[:2], budgets[:2], controls[:2], {0: 0, 2: 1}
    expected = [
        zoo.generate(model, [prompt], max_new_tokens=b, source=[source], suppress_token_ids=suppressed,
                     **(s or {}), **(c or {})).sequences[0]
        for source, b, s, c in zip(sources, budgets, SETTINGS, controls)
    ]
    slots = Slots(model, max_batch=2, suppress_token_ids=suppressed)
    requests, step = [], 0
    while step <= max(joins) or slots.busy:
        if step in joins:
            i = joins[step]
            requests.append(slots.add(prompt, budgets[i], SETTINGS[i], controls[i], source=sources[i]))
        slots.step()
        assert slots.in_use <= 2
        step += 1
    assert slots.source_length == 32
    for request, want in zip(requests, expected):
        assert request.new_tokens == want
        assert request.finish_reason == LENGTH
    if suppressed:
        assert not set(suppressed) & {t for request in requests for t in request.new_tokens}


@pytest.mark.integration  # compiles zoo.generate's programs and the slots' for each model
def test_a_stop_token_and_a_cancellation_free_the_slot_at_once():
    keras.utils.set_random_seed(0)
    model = zoo.build("transformer-tiny", max_sequence_length=WINDOW)
    first, long, short = _ids(model.source_vocabulary_size, (5, 20, 3), seed=4)

    def generated(source, budget, **settings):
        return zoo.generate(model, [[1]], max_new_tokens=budget, source=[source], **settings).sequences[0]

    greedy = generated(first, 10)
    slots = Slots(model, max_batch=1, stop_token_ids=[greedy[2]])
    stopped = slots.add([1], 10, source=first)
    while not stopped.finished:
        slots.step()
    assert stopped.new_tokens == greedy[: greedy.index(greedy[2]) + 1] and stopped.finish_reason == STOP
    assert slots.in_use == 0
    slots = Slots(model, max_batch=1)
    cancelled = slots.add([1], 20, source=long)
    waiting = slots.add([1], 6, source=short)
    slots.step()
    assert cancelled.slot == 0 and waiting.slot is None
    slots.finish(cancelled)  # the client went away
    assert slots.in_use == 0
    slots.step()
    assert waiting.slot == 0 and len(waiting.new_tokens) == 1
    assert len(cancelled.new_tokens) == 1 and cancelled.finish_reason == STOP
    while slots.busy:
        slots.step()
    # The slot held a longer source's context before (32 positions to its 16): none of it is read.
    assert waiting.new_tokens == generated(short, 6) and waiting.finish_reason == LENGTH


def test_slots_refuse_what_they_cannot_decode():
    model = zoo.build("transformer-tiny", max_sequence_length=WINDOW)
    slots = Slots(model, max_batch=2)
    with pytest.raises(ValueError, match="needs its `source`"):
        slots.add([1], 4)
    with pytest.raises(ValueError, match="longer than the model's window of 32"):
        slots.add([1], 4, source=[5] * 33)
    with pytest.raises(ValueError, match=r"source's token ids must be in \[0, 1000\)"):
        slots.add([1], 4, source=[1000])
    with pytest.raises(ValueError, match="window of 32 positions"):
        slots.add([1], 32, source=[5])
    with pytest.raises(ValueError, match="encoder-decoder.*prefix_cache_tokens=0"):
        Slots(model, prefix_cache_tokens=64)
    lm = zoo.build("gpt-nano", "causal_lm", max_sequence_length=WINDOW)
    with pytest.raises(ValueError, match="decoder-only and takes no `source`"):
        Slots(lm).add([1], 4, source=[5])
