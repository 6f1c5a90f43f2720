"""The decoder-only model as a sequence-to-sequence function: trained on
`source [SEP] target` with the loss on the target only, then "initializing
the Decoder input to the function input sequence" and generating."""

import keras
import numpy as np

import zoo
from zoo import generate

SEP, OFFSET, LENGTH = 1, 2, 4


def _pairs(n, seed):
    rng = np.random.default_rng(seed)
    source = rng.integers(OFFSET, OFFSET + 8, (n, LENGTH))
    return source, source[:, ::-1]  # reverse the sequence


def test_gpt_conditioned_on_a_prefix_learns_to_reverse():
    keras.utils.set_random_seed(0)
    model = zoo.build("gpt-nano", task="causal_lm", vocabulary_size=OFFSET + 8, hidden_dim=64, max_sequence_length=16)
    source, target = _pairs(2048, seed=0)
    sequence = np.concatenate([source, np.full((len(source), 1), SEP), target], axis=1).astype("int32")
    x = {"token_ids": sequence[:, :-1], "padding_mask": np.ones_like(sequence[:, :-1])}
    y = sequence[:, 1:]
    weights = np.zeros(y.shape, "float32")
    weights[:, LENGTH:] = 1.0  # predict the target only, given the prefix
    model.compile(keras.optimizers.Adam(3e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, sample_weight=weights, epochs=6, batch_size=64, verbose=0)

    test_source, test_target = _pairs(64, seed=1)
    prompts = np.concatenate([test_source, np.full((64, 1), SEP)], axis=1)
    out = generate(model, prompts.tolist(), max_new_tokens=LENGTH)
    predicted = np.array(out.sequences)
    accuracy = (predicted == test_target).mean()
    assert accuracy > 0.9, accuracy  # chance is 1/8
