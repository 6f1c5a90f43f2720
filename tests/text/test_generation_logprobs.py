"""Log-probabilities from `zoo.generate` and `zoo.stream`: each new token's
log-probability and its k likeliest alternatives, recorded inside the
compiled loop, against a float64 NumPy reference (a plain forward pass over
the tokens before it, the last W of them past the window); the cached
stream and the whole-generation loop agree; asking for them changes no
token."""

import numpy as np
import pytest

import zoo
from tests.text.test_scoring import WINDOW, _reference, lm  # noqa: F401  (lm: the scoring tests' model fixture)

K = 3


def _check_against_reference(lm, prompt, new, token_logprobs, top_ids, top_logprobs):
    assert len(token_logprobs) == len(top_ids) == len(top_logprobs) == len(new) > 0
    for j, token in enumerate(new):
        chosen, _, all_logprobs = _reference(lm, list(prompt) + list(new[:j]), [token])
        np.testing.assert_allclose(token_logprobs[j], chosen[0], rtol=1e-5, atol=1e-5)
        expected_top = np.argsort(-all_logprobs[0], kind="stable")[:K]
        np.testing.assert_array_equal(top_ids[j], expected_top)
        np.testing.assert_allclose(top_logprobs[j], all_logprobs[0][expected_top], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("sampling", [
    dict(sampler="greedy"),
    dict(sampler="top_k", top_k=5, temperature=0.7, seed=3),
    dict(sampler="top_p", top_p=0.8, seed=4, repetition_penalty=1.5, presence_penalty=0.5),
])
def test_token_ids_logprobs_match_float64_reference(lm, sampling):
    prompts = [[3, 4, 5], [6, 7, 8, 9, 10, 11, 12]]
    out = zoo.generate(lm, prompts, max_new_tokens=6, logprobs=K, **sampling)
    for row, prompt in enumerate(prompts):
        _check_against_reference(lm, prompt, out.sequences[row], out.token_logprobs[row], out.top_ids[row],
                                 out.top_logprobs[row])
    plain = zoo.generate(lm, prompts, max_new_tokens=6, **sampling)
    assert plain.sequences == out.sequences and plain.token_logprobs is None


def test_text_past_the_window_matches_the_reference_and_the_stream(lm):
    options = dict(max_new_tokens=WINDOW + 6, sampler="top_k", top_k=4, seed=7, logprobs=K)
    generated = zoo.generate(lm, "ROMEO: ", **options)
    assert isinstance(generated, zoo.text.GeneratedText)
    assert generated.text == zoo.generate(lm, "ROMEO: ", **{**options, "logprobs": None})
    prompt = [int(t) for t in lm.tokenizer("ROMEO: ")]
    assert len(prompt) + len(generated.token_ids) > WINDOW  # past the window: nanoGPT's sliding window
    _check_against_reference(lm, prompt, generated.token_ids, generated.token_logprobs, generated.top_ids,
                             generated.top_logprobs)
    assert generated.tokens == tuple(lm.tokenizer.detokenize([t]) for t in generated.token_ids)

    pieces = list(zoo.stream(lm, "ROMEO: ", **options))  # one compiled call per token, the cache growing
    assert all(isinstance(piece, zoo.text.GeneratedText) for piece in pieces)
    assert "".join(piece.text for piece in pieces) == generated.text
    assert sum((piece.token_ids for piece in pieces), ()) == generated.token_ids
    np.testing.assert_allclose(np.concatenate([p.token_logprobs for p in pieces]), generated.token_logprobs,
                               rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(np.concatenate([p.top_ids for p in pieces]), generated.top_ids)


def test_zero_alternatives_and_a_stop_token(lm):
    stop = int(lm.tokenizer(":")[0])
    out = zoo.generate(lm, [[3, 4, 5]] * 2, max_new_tokens=12, sampler="temperature", seed=[1, 2],
                       stop_token_ids=[stop], logprobs=0)
    assert [len(row) for row in out.top_ids] == [len(row) for row in out.sequences]
    assert all(ids == [] for row in out.top_ids for ids in row)
    texts = zoo.generate(lm, ["ROM", "JUL"], max_new_tokens=12, sampler="temperature", seed=1,
                         stop_token_ids=[stop], logprobs=2)
    for generated in texts:  # the stop token that ended a text is not one of its tokens
        assert stop not in generated.token_ids
        assert generated.top_ids.shape == (len(generated.token_ids), 2)


def test_misuse_gets_one_clear_line(lm):
    for bad in (-1, "2", 2.0, True, lm.vocabulary_size + 1):
        with pytest.raises(ValueError, match=r"`logprobs` must be None or an integer in \[0, \d+\]"):
            zoo.generate(lm, [[3, 4]], max_new_tokens=2, logprobs=bad)
    with pytest.raises(ValueError, match="`logprobs` is not taken by beam search"):
        zoo.generate(lm, "ROMEO", max_new_tokens=2, sampler="beam", logprobs=1)
    with pytest.raises(ValueError, match="`logprobs` is not taken by beam search"):
        zoo.generate(lm, [[3, 4]], max_new_tokens=2, sampler="beam", logprobs=1)
