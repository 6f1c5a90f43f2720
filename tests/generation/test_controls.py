"""The decoding controls on fixed logits against float64 NumPy references
of their definitions: transformers' repetition penalty, OpenAI's presence
and frequency penalties and logit bias, min_p; each row by its own
settings; all off changes nothing; bad settings refused in one line."""

import numpy as np
import pytest
from keras import ops

from zoo.generation.controls import REMOVED, Controls, apply

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
        min_p = arrays["min_p"][b]
        if min_p > 0:
            probabilities = np.exp((out[b] - out[b].max()) / temperature)
            probabilities /= probabilities.sum()
            out[b][probabilities < min_p * probabilities.max()] = REMOVED
    return out


@pytest.fixture
def step():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(B, V)).astype("float32") * 3
    token_ids = rng.integers(0, V, size=(B, L)).astype("int32")
    token_ids[0, 4:8] = [5, 5, 5, 7]  # a token repeated in the output
    return logits, token_ids, 8, np.array([4, 6, 2], "int32")


@pytest.mark.parametrize("settings", [
    dict(repetition_penalty=1.3),
    dict(repetition_penalty=[1.0, 0.7, 2.0]),
    dict(presence_penalty=0.8),
    dict(frequency_penalty=[0.5, -1.0, 2.0]),
    dict(presence_penalty=-0.5, frequency_penalty=1.5),
    dict(min_p=0.2),
    dict(min_p=[0.0, 0.5, 0.05]),
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
