"""`zoo.generation`: cached == uncached, batch == alone, samplers, beams,
stop tokens, one compilation per shape, and clear errors.

The reference ("uncached") decoder re-runs the whole functional model on
the prefix at every step and takes the argmax at the last real position.
The models' weights (all but the LayerNorms') are scrambled to N(0, 0.3)
so that they emit varied tokens and an equality is not met by a constant
output.
"""

import keras
import numpy as np
import pytest

import zoo
from zoo import generate
from zoo.generation import beam_search, loop, trace_count

GPT_PROMPTS = [[5, 17, 42, 8], [9, 3], [60, 61, 62, 63, 64, 65]]
SOURCES = [[11, 12, 13, 14, 15], [21, 22], [31, 32, 33]]
STARTS = [[1], [1, 7], [1]]
NEW = 6


def _scramble(model, seed):
    rng = np.random.default_rng(seed)
    for w in model.weights:
        if "norm" not in w.path:
            w.assign(rng.normal(0.0, 0.3, w.shape).astype(w.dtype))
    return model


@pytest.fixture(scope="module")
def gpt():
    keras.utils.set_random_seed(0)
    return _scramble(zoo.build("gpt-nano", task="causal_lm"), 0)


@pytest.fixture(scope="module")
def seq2seq():
    keras.utils.set_random_seed(0)
    return _scramble(zoo.build("transformer-tiny", vocabulary_size=100), 1)


def _full_logits(model, tokens, source=None, length=16):
    """The whole functional model, as `predict` runs it, on one sequence;
    (len(tokens), V) logits.

    The sequence (and the source) is right-padded to a fixed length and
    masked, so that every call has one shape and `predict` compiles once.
    Under the causal mask, padding after a position changes nothing at it.
    """
    ids = np.zeros((1, length), "int32")
    ids[0, : len(tokens)] = tokens
    mask = (np.arange(length) < len(tokens))[None].astype("int32")
    if source is None:
        inputs = {"token_ids": ids, "padding_mask": mask}
    else:
        src = np.zeros((1, 8), "int32")
        src[0, : len(source)] = source
        inputs = {
            "encoder_token_ids": src,
            "encoder_padding_mask": (src != 0).astype("int32"),
            "decoder_token_ids": ids,
            "decoder_padding_mask": mask,
        }
    return np.asarray(model.predict_on_batch(inputs))[0, : len(tokens)]


def _uncached_greedy(model, prompt, steps, source=None):
    """Re-run the full model on the whole prefix for every new token."""
    tokens = list(prompt)
    for _ in range(steps):
        tokens.append(int(np.argmax(_full_logits(model, tokens, source)[-1])))
    return tokens[len(prompt) :]


@pytest.fixture(scope="module")
def gpt_greedy(gpt):
    return generate(gpt, GPT_PROMPTS, NEW)


# --- Cached == uncached, batch == alone ---------------------------------------


def test_decoder_only_cached_equals_uncached(gpt, gpt_greedy):
    expected = [_uncached_greedy(gpt, p, NEW) for p in GPT_PROMPTS]
    assert gpt_greedy.sequences == expected
    assert len({t for row in expected for t in row}) > 3  # not a constant output


def test_decoder_only_output_arrays(gpt_greedy):
    out = gpt_greedy
    longest = max(map(len, GPT_PROMPTS))
    assert out.token_ids.shape == (3, longest + NEW) and out.token_ids.dtype == np.int32
    np.testing.assert_array_equal(out.prompt_lengths, [4, 2, 6])
    np.testing.assert_array_equal(out.lengths, out.prompt_lengths + NEW)
    for row, prompt, new, length in zip(out.token_ids, GPT_PROMPTS, out.sequences, out.lengths):
        assert row[: len(prompt)].tolist() == prompt
        assert row[len(prompt) : length].tolist() == new
        assert not row[length:].any()  # padding after the sequence


def test_short_prompt_in_batch_equals_alone(gpt, gpt_greedy):
    alone = generate(gpt, [GPT_PROMPTS[1]], NEW)
    assert alone.sequences[0] == gpt_greedy.sequences[1]


def test_padded_array_prompt_equals_list(gpt, gpt_greedy):
    # Left padding, to show that any padding the mask describes works.
    ids = np.zeros((3, 6), "int32")
    mask = np.zeros((3, 6), bool)
    for i, p in enumerate(GPT_PROMPTS):
        ids[i, 6 - len(p) :], mask[i, 6 - len(p) :] = p, True
    assert generate(gpt, ids, NEW, padding_mask=mask).sequences == gpt_greedy.sequences


def test_bare_backbone_generates_like_the_causal_lm(gpt, gpt_greedy):
    out = generate(gpt.backbone, GPT_PROMPTS, NEW)
    assert out.sequences == gpt_greedy.sequences


def test_encoder_decoder_cached_equals_uncached(seq2seq):
    out = generate(seq2seq, STARTS, NEW, source=SOURCES)
    expected = [_uncached_greedy(seq2seq, p, NEW, source=s) for s, p in zip(SOURCES, STARTS)]
    assert out.sequences == expected
    assert len({t for row in expected for t in row}) > 3


# --- Samplers -------------------------------------------------------------------


def test_beam_search_with_one_beam_is_greedy(gpt, gpt_greedy):
    out = generate(gpt, GPT_PROMPTS, NEW, sampler="beam", num_beams=1)
    assert out.sequences == gpt_greedy.sequences


def test_top_k_with_k_1_is_greedy(gpt, gpt_greedy):
    out = generate(gpt, GPT_PROMPTS, NEW, sampler="top_k", top_k=1, seed=3)
    assert out.sequences == gpt_greedy.sequences


def test_sampling_with_a_seed_is_reproducible(gpt):
    kwargs = dict(sampler="top_p", temperature=3.0, top_p=0.95)
    first = generate(gpt, GPT_PROMPTS, NEW, seed=7, **kwargs).sequences
    assert generate(gpt, GPT_PROMPTS, NEW, seed=7, **kwargs).sequences == first
    assert generate(gpt, GPT_PROMPTS, NEW, seed=8, **kwargs).sequences != first


def _log_probs(model, prompt, new, source=None):
    """log p(new | prompt[, source]) from one full forward pass."""
    logits = _full_logits(model, prompt + new, source)
    logits = logits - logits.max(-1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    positions = np.arange(len(prompt) - 1, len(prompt) + len(new) - 1)
    return log_probs[positions, new].sum()


def test_beam_search_scores_all_beams_best_first(gpt):
    stop = 3
    out = beam_search(gpt, GPT_PROMPTS[:2], NEW, num_beams=3, length_penalty=1.0, stop_token_ids=[stop])
    assert out.token_ids.shape == (2, 3, 4 + NEW) and out.scores.shape == (2, 3)
    assert (np.diff(out.scores, axis=1) <= 0).all()
    for prompt, beams, scores in zip(GPT_PROMPTS, out.sequences, out.scores):
        assert len({tuple(b) for b in beams}) == 3  # distinct hypotheses
        for new, score in zip(beams, scores):
            assert stop not in new[:-1] and (len(new) == NEW or new[-1] == stop)
            expected = _log_probs(gpt, prompt, new) / len(new)
            np.testing.assert_allclose(score, expected, rtol=1e-4)


def test_encoder_decoder_beam_search_scores(seq2seq):
    # Each row's encoder output and padding mask are repeated for its beams:
    # every hypothesis scores what the full model gives it on its own source.
    out = beam_search(seq2seq, STARTS, NEW, num_beams=2, length_penalty=0.0, source=SOURCES)
    assert (np.diff(out.scores, axis=1) <= 0).all()
    for source, start, beams, scores in zip(SOURCES, STARTS, out.sequences, out.scores):
        for new, score in zip(beams, scores):
            np.testing.assert_allclose(score, _log_probs(seq2seq, start, new, source), rtol=1e-4)


@pytest.mark.parametrize("family", ["gpt", "seq2seq"])
def test_beam_search_through_cache_stages_equals_one_stage(family, request, monkeypatch):
    # 24 new tokens cross the stage of 16 positions, where each beam's
    # cache grows; one stage of the whole length never grows.
    model = request.getfixturevalue(family)
    kwargs = dict(num_beams=3, length_penalty=1.0)
    if family == "seq2seq":
        kwargs.update(source=SOURCES)
    prompts = GPT_PROMPTS if family == "gpt" else STARTS
    staged = beam_search(model, prompts, 24, **kwargs)
    monkeypatch.setattr("zoo.generation.api.BEAM_FIRST_STAGE", 64)
    before = trace_count()
    whole = beam_search(model, prompts, 24, **kwargs)
    assert trace_count() == before + 1  # another program: one stage of 64 positions
    assert staged.sequences == whole.sequences
    assert len({t for row in staged.sequences for beam in row for t in beam}) > 3
    np.testing.assert_allclose(staged.scores, whole.scores, rtol=1e-5)


# --- Stop tokens, compilation ----------------------------------------------------


@pytest.fixture(scope="module")
def stop(gpt_greedy):
    return gpt_greedy.sequences[0][2]


@pytest.fixture(scope="module")
def gpt_stopped(gpt, stop):
    return generate(gpt, GPT_PROMPTS, NEW, stop_token_ids=[stop])


def test_stop_tokens_trim(gpt_greedy, gpt_stopped, stop):
    out = gpt_stopped
    for full, trimmed, prompt, length, row in zip(
        gpt_greedy.sequences, out.sequences, GPT_PROMPTS, out.lengths, out.token_ids
    ):
        cut = full.index(stop) + 1 if stop in full else NEW
        assert trimmed == full[:cut]
        assert length == len(prompt) + cut and not row[length:].any()
    assert out.sequences[0][-1] == stop and len(out.sequences[0]) <= 3


def test_cache_stages_change_nothing(gpt, gpt_stopped, stop, monkeypatch):
    # Tiny stages: (6, 12) for the batch, (4, 8) for the short prompt. (Beam search's
    # stages: test_beam_search_through_cache_stages_equals_one_stage.)
    monkeypatch.setattr(loop, "FIRST_STAGE", 4)
    assert loop.stage_lengths(6, 12) == (6, 12) and loop.stage_lengths(2, 8) == (4, 8)
    assert generate(gpt, GPT_PROMPTS, NEW, stop_token_ids=[stop]).sequences == gpt_stopped.sequences


@pytest.mark.skipif(keras.config.backend() == "torch", reason="torch runs generation eagerly: nothing is traced")
def test_second_call_with_the_same_shapes_does_not_retrace(gpt, gpt_greedy):
    before = trace_count()
    other = [[p + 1 for p in prompt] for prompt in GPT_PROMPTS]  # the same lengths
    again = generate(gpt, other, NEW)
    assert trace_count() == before
    assert again.sequences != gpt_greedy.sequences


# --- Bad input -------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(prompt=[[1, 2], []]), "sequence 1 is empty"),
        (dict(prompt=[]), "non-empty batch"),
        (dict(prompt=[1, 2, 3]), "one flat sequence"),
        (dict(max_new_tokens=0), "max_new_tokens"),
        (dict(prompt=[[1] * 30], max_new_tokens=3), "maximum sequence length 32"),
        (dict(sampler="top_p", top_p=0.0), r"`top_p` must be in \(0, 1\]"),
        (dict(sampler="top_p", top_p=1.5), r"`top_p` must be in \(0, 1\]"),
        (dict(sampler="top_k", top_k=0), r"`top_k` must be an integer in \[1, 100\]"),
        (dict(sampler="temperature", temperature=0.0), "temperature"),
        (dict(sampler="beam", num_beams=0), "num_beams"),
        (dict(sampler="nucleus"), "Unknown sampler"),
        (dict(prompt=[[1, 100]]), "outside the vocabulary"),
        (dict(source=[[1]]), "decoder-only"),
    ],
)
def test_bad_input_is_a_clear_error(gpt, kwargs, message):
    arguments = dict(model=gpt, prompt=[[1, 2]], max_new_tokens=4) | kwargs
    with pytest.raises(ValueError, match=message):
        generate(**arguments)


def test_encoder_decoder_needs_a_source(seq2seq):
    with pytest.raises(ValueError, match="pass the encoder input as `source`"):
        generate(seq2seq, [[1]], 4)


def test_encoder_only_model_is_an_error():
    bert = zoo.build("bert-tiny", task="masked_lm")
    with pytest.raises(ValueError, match="BertMaskedLM has no cached step.*encoder-only models"):
        generate(bert, [[1, 2]], 4)


@pytest.mark.parametrize("shape", [(3,), (2, 5), (1, 2, 4, 3)])
def test_repeat_rows_is_numpy_repeat_on_the_first_axis(shape):
    from zoo.generation.beam import repeat_rows

    x = np.arange(int(np.prod(shape)), dtype="float32").reshape(shape)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(repeat_rows(keras.ops.convert_to_tensor(x), 4)),
                                  np.repeat(x, 4, axis=0))
