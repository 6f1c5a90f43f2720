"""The decoding controls on fixed logits against float64 NumPy references
of their definitions: transformers' repetition penalty, OpenAI's presence
and frequency penalties and logit bias, transformers' no-repeat n-gram
rule, min_p; each row by its own
settings; all off changes nothing; bad settings refused in one line."""

import numpy as np
import pytest
from keras import ops

from zoo.generation.controls import NGRAM_MOST, REMOVED, Controls, apply

B, L, V = 3, 10, 12


def reference(logits, token_ids, index, prompt_lengths, controls, temperature):
    """One step, in float64, as the definitions read."""
    out = np.array(logits, "float64")
    arrays = controls.arrays()
    for b in range(len(out)):
        out[b] += arrays["logit_bias"][b]
        seen = set(token_ids[b, :index].tolist())  # prompt and output
        penalty = arrays["repetition_penalty"][b]
        for t in seen:  # transformers: divide a positive logit, multiply a negative one
            out[b, t] = out[b, t] / penalty if out[b, t] > 0 else out[b, t] * penalty
        generated = token_ids[b, prompt_lengths[b]:index].tolist()
        for t in set(generated):  # OpenAI: over the generated tokens
            out[b, t] -= arrays["frequency_penalty"][b] * generated.count(t) + arrays["presence_penalty"][b]
        for t in banned_ngram_ends(token_ids[b, :index].tolist(), int(arrays["no_repeat_ngram_size"][b])):
            out[b, t] = REMOVED
        min_p = arrays["min_p"][b]
        if min_p > 0:
            probabilities = np.exp((out[b] - out[b].max()) / temperature)
            probabilities /= probabilities.sum()
            out[b][probabilities < min_p * probabilities.max()] = REMOVED
    return out


def banned_ngram_ends(tokens, n):
    """transformers' `NoRepeatNGramLogitsProcessor` for one row: the n-grams
    of `tokens`, keyed by their first n - 1; the banned tokens are those
    that follow the last n - 1 tokens."""
    if n == 0 or len(tokens) + 1 < n:
        return []
    ngrams = {}
    for start in range(len(tokens) - n + 1):
        gram = tokens[start:start + n]
        ngrams.setdefault(tuple(gram[:-1]), []).append(gram[-1])
    return ngrams.get(tuple(tokens[len(tokens) - n + 1:]), [])


@pytest.fixture
def step():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(B, V)).astype("float32") * 3
    token_ids = rng.integers(0, V, size=(B, L)).astype("int32")
    token_ids[0, 4:8] = [5, 5, 5, 7]  # a token repeated in the output
    token_ids[1, 0:8] = [2, 9, 4, 6, 2, 9, 4, 1]  # n-grams that come back (and end the buffer at index 8)
    token_ids[1, 1:3] = [9, 4]
    token_ids[1, 6:8] = [9, 4]
    return logits, token_ids, 8, np.array([4, 6, 2], "int32")


@pytest.mark.parametrize("settings", [
    dict(repetition_penalty=1.3),
    dict(repetition_penalty=[1.0, 0.7, 2.0]),
    dict(presence_penalty=0.8),
    dict(frequency_penalty=[0.5, -1.0, 2.0]),
    dict(presence_penalty=-0.5, frequency_penalty=1.5),
    dict(min_p=0.2),
    dict(min_p=[0.0, 0.5, 0.05]),
    dict(no_repeat_ngram_size=1),
    dict(no_repeat_ngram_size=[2, 3, 0]),
    dict(no_repeat_ngram_size=[3, 2, NGRAM_MOST]),
    dict(logit_bias={3: 5.0, 7: -100}),
    dict(logit_bias=[{1: 2.5}, None, {11: -3.0}], repetition_penalty=1.2, presence_penalty=0.3,
         frequency_penalty=0.4, min_p=0.1),
])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_the_controls_match_their_definitions(step, settings, temperature):
    logits, token_ids, index, prompt_lengths = step
    controls = Controls(B, V, **settings)
    arrays = {k: ops.convert_to_tensor(v) for k, v in controls.arrays().items()}
    got = ops.convert_to_numpy(apply(ops.convert_to_tensor(logits), ops.convert_to_tensor(token_ids), index,
                                     ops.convert_to_tensor(prompt_lengths), arrays, temperature))
    expected = reference(logits, token_ids, index, prompt_lengths, controls, temperature)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4)
    assert not np.allclose(expected, logits)  # each setting changes this step


def test_controls_that_are_off_change_nothing(step):
    logits, token_ids, index, prompt_lengths = step
    controls = Controls(B, V, repetition_penalty=1.0, presence_penalty=0, frequency_penalty=0, min_p=0)
    assert not controls.active and Controls(B, V, min_p=0.1).active
    arrays = {k: ops.convert_to_tensor(v) for k, v in controls.arrays().items()}
    got = ops.convert_to_numpy(apply(ops.convert_to_tensor(logits), ops.convert_to_tensor(token_ids), index,
                                     ops.convert_to_tensor(prompt_lengths), arrays))
    np.testing.assert_array_equal(got, logits)


@pytest.mark.parametrize("settings, message", [
    (dict(repetition_penalty=0), "`repetition_penalty` must be a number > 0"),
    (dict(presence_penalty=2.5), "`presence_penalty` must be a number in [-2, 2]"),
    (dict(frequency_penalty=float("nan")), "`frequency_penalty` must be a number in [-2, 2]"),
    (dict(min_p=1.5), "`min_p` must be a number in [0, 1]"),
    (dict(min_p=[0.1, 0.2]), "expected one number or 3"),
    (dict(logit_bias={V: 1.0}), f"token id {V} is outside the vocabulary"),
    (dict(logit_bias={1: 101}), "must be a number in [-100, 100]"),
])
def test_bad_controls_are_refused_in_one_line(settings, message):
    with pytest.raises(ValueError) as error:
        Controls(B, V, **settings)
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("settings, message", [
    (dict(min_new_tokens=-1), "`min_new_tokens` must be an integer >= 0"),
    (dict(no_repeat_ngram_size=11), "`no_repeat_ngram_size` must be an integer in [0, 10]"),
    (dict(early_stopping="sometimes"), "`early_stopping` must be True, False or \"never\""),
    (dict(early_stopping=1), "`early_stopping` must be True, False or \"never\""),
    (dict(forced_first_token_id=V), f"`forced_first_token_id` must be an integer in [0, {V - 1}]"),
    (dict(forced_stop_token_id=-1), f"`forced_stop_token_id` must be an integer in [0, {V - 1}]"),
])
def test_bad_length_controls_of_beam_search_are_refused_in_one_line(settings, message):
    from zoo.generation.api import check_length_controls

    arguments = {**dict(min_new_tokens=0, no_repeat_ngram_size=0, early_stopping="never", forced_first_token_id=None,
                        forced_stop_token_id=None), **settings}
    with pytest.raises(ValueError) as error:
        check_length_controls(*arguments.values(), V)
    assert message in str(error.value) and "\n" not in str(error.value)


# --- In the decoding engine -----------------------------------------------------------------------

CONTEXT = 32


@pytest.fixture(scope="module")
def lm():
    import keras

    import zoo
    from zoo.tokenizers import CharTokenizer

    keras.utils.set_random_seed(1)
    tokenizer = CharTokenizer.from_text("abcdefghij ROMEO:\n")
    return zoo.build("gpt-nano", "causal_lm", vocabulary_size=tokenizer.vocabulary_size(), max_sequence_length=CONTEXT,
                     initializer_range=0.3, tokenizer=tokenizer)


ROW_CONTROLS = dict(repetition_penalty=[1.8, 1.0], presence_penalty=[0.5, 1.2], frequency_penalty=[0.7, -0.4],
                    min_p=[0.05, 0.2], logit_bias=[{3: 4.0}, {5: -100, 7: 2.5}], no_repeat_ngram_size=[2, 0])


def greedy_reference(lm, prompts, steps, settings):
    """Each row alone, every step a full forward pass (no cache), the
    controls in float64, the argmax."""
    rows = []
    for row, prompt in enumerate(prompts):
        one = {k: (v[row] if isinstance(v, list) else v) for k, v in settings.items()}
        controls = Controls(1, lm.vocabulary_size, **one)
        ids = list(prompt)
        for _ in range(steps):
            logits = ops.convert_to_numpy(lm({"token_ids": np.array([ids]), "padding_mask": np.ones((1, len(ids)))}))
            processed = reference(logits[:, -1], np.array([ids]), len(ids), [len(prompt)], controls, 1.0)
            ids.append(int(np.argmax(processed[0])))
        rows.append(ids[len(prompt):])
    return rows


def test_zoo_generate_with_each_rows_controls_is_the_uncached_reference_of_each_row_alone(lm):
    import zoo

    prompts = [[1, 2, 3, 2], [4, 5, 6, 7, 8, 9, 4]]  # ragged: right-padded in the batch
    out = zoo.generate(lm, prompts, max_new_tokens=12, **ROW_CONTROLS)
    assert out.sequences == greedy_reference(lm, prompts, 12, ROW_CONTROLS)
    assert out.sequences != zoo.generate(lm, prompts, max_new_tokens=12).sequences  # the controls changed them


@pytest.mark.parametrize("options", [dict(), dict(sampler="top_p", top_p=0.9, temperature=1.3, seed=5)])
def test_the_stream_and_the_whole_loop_choose_the_same_tokens_under_controls(lm, options):
    import zoo

    settings = dict(repetition_penalty=1.5, frequency_penalty=0.6, min_p=0.05, logit_bias={2: 3.0},
                    no_repeat_ngram_size=3)
    whole = zoo.generate(lm, "ROMEO:", max_new_tokens=20, **settings, **options)
    assert "".join(zoo.stream(lm, "ROMEO:", max_new_tokens=20, **settings, **options)) == whole
    past = zoo.generate(lm, "ROMEO:", max_new_tokens=40, **settings, **options)  # past the window of 32
    assert "".join(zoo.stream(lm, "ROMEO:", max_new_tokens=40, **settings, **options)) == past


def test_no_repeat_ngram_size_leaves_no_n_gram_twice(lm):
    import zoo

    prompt = [1, 2, 3, 1, 2]
    plain = zoo.generate(lm, [prompt], max_new_tokens=24).sequences[0]
    tokens = prompt + plain
    assert len({tuple(tokens[i:i + 2]) for i in range(len(tokens) - 1)}) < len(tokens) - 1  # greedy repeats some

    for n in (2, 3):
        tokens = prompt + zoo.generate(lm, [prompt], max_new_tokens=24, no_repeat_ngram_size=n).sequences[0]
        grams = [tuple(tokens[i:i + n]) for i in range(len(prompt) - n + 1, len(tokens) - n + 1)]  # each new one
        before = {tuple(tokens[i:i + n]) for i in range(len(prompt) - n + 1)}  # the prompt's own
        assert len(set(grams)) == len(grams) and not set(grams) & before


def test_controls_that_are_off_compile_nothing_new(lm):
    import zoo
    from zoo.generation import compiled

    plain = zoo.generate(lm, [[1, 2, 3]], max_new_tokens=6).sequences
    traced = compiled.trace_count()
    off = zoo.generate(lm, [[1, 2, 3]], max_new_tokens=6, repetition_penalty=1.0, presence_penalty=0.0, min_p=0.0)
    assert off.sequences == plain and compiled.trace_count() == traced


def test_beam_search_refuses_the_controls(lm):
    import zoo

    with pytest.raises(ValueError, match="not taken by beam search"):
        zoo.generate(lm, [[1, 2]], max_new_tokens=3, sampler="beam", min_p=0.1)
