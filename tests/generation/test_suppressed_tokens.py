"""`suppress_token_ids` (transformers' single-token `bad_words_ids`, Marian's
`<pad>`): the ids are never chosen, by any sampler, beam search, or the
token-by-token stream; what is chosen otherwise is unchanged."""

import numpy as np
import pytest

import zoo
from zoo.generation.engine import Decoding


@pytest.fixture(scope="module")
def lm():
    return zoo.build("gpt-nano", task="causal_lm")


def favourite(lm, prompt):
    """The greedy continuation, and the id it chooses most."""
    tokens = zoo.generate(lm, prompt, max_new_tokens=8).sequences
    values, counts = np.unique(np.concatenate(tokens), return_counts=True)
    return tokens, int(values[np.argmax(counts)])


@pytest.mark.parametrize("sampler", ["greedy", "top_k", "beam"])
def test_a_suppressed_id_is_never_chosen(lm, sampler):
    prompt = [[1, 2, 3], [4, 5]]
    _, banned = favourite(lm, prompt)
    out = zoo.generate(lm, prompt, max_new_tokens=8, sampler=sampler, seed=0, top_k=5, suppress_token_ids=[banned])
    assert all(banned not in row for row in out.sequences)
    assert all(len(row) == 8 for row in out.sequences)


def test_suppressing_nothing_chosen_changes_nothing(lm):
    prompt = [[1, 2, 3], [4, 5]]
    tokens, _ = favourite(lm, prompt)
    unused = next(i for i in range(lm.vocabulary_size) if all(i not in row for row in tokens))
    assert zoo.generate(lm, prompt, max_new_tokens=8, suppress_token_ids=[unused]).sequences == tokens


def test_the_stream_suppresses_as_the_whole_loop(lm):
    prompt = [[1, 2, 3]]
    _, banned = favourite(lm, prompt)
    whole = Decoding(lm, prompt, 8, suppress_token_ids=[banned]).run().new_tokens
    stream = Decoding(lm, prompt, 8, suppress_token_ids=[banned])
    for _ in stream.steps(every_token=True):
        pass
    assert stream.new_tokens == whole and banned not in whole[0]


def test_an_id_outside_the_vocabulary_is_refused(lm):
    with pytest.raises(ValueError, match="Suppressed token id 100 is outside the vocabulary"):
        zoo.generate(lm, [[1]], max_new_tokens=2, suppress_token_ids=[100])
