"""Tokenizers saved by an earlier version of the zoo still load, with the
same ids: `tests/tokenizers/saved/` was written by zoo 0.1.0 with its
tokenizers in `zoo.data` and a byte-pair trainer of its own, not the
`tokenizers` package's. `gpt-NAME.keras`, `marian-tiny.keras` and `t5-tiny.keras` are
tiny models carrying each kind of tokenizer the zoo registers (Keras
finds them by their registered names, `zoo>CharTokenizer`, ...);
`byte_pair/` is a vocabulary and merges that `train_byte_pair` trained and
keras-hub's `save_assets` wrote. `expected.json` holds the ids and texts
they gave then, non-ASCII text included."""

import json
from pathlib import Path

import numpy as np
import pytest

import zoo
from zoo.tokenizers import token_id_lists

SAVED = Path(__file__).resolve().parent / "saved"
EXPECTED = json.loads((SAVED / "expected.json").read_text(encoding="utf-8"))


def _check(tokenizer, expected):
    assert type(tokenizer).__name__ == expected["class"]
    assert token_id_lists(tokenizer, expected["probes"]) == expected["ids"]
    texts = [tokenizer.detokenize(np.asarray(ids, "int32")) for ids in expected["ids"]]
    assert texts == expected["texts"]


@pytest.mark.parametrize("name", ["gpt-char", "gpt-word", "gpt-byte_pair", "gpt-sentence_piece"])
def test_a_model_file_saved_before_carries_a_tokenizer_with_the_same_ids(name):
    expected = EXPECTED[name]
    tokenizer = zoo.load(SAVED / f"{name}.keras").tokenizer
    _check(tokenizer, expected)
    assert tokenizer.vocabulary_size() == expected["vocabulary_size"]
    if "chat_ids" in expected:
        assert tokenizer.apply_chat_template([{"role": "user", "content": "the cat"}]) == expected["chat_ids"]


@pytest.mark.parametrize("name", ["marian-tiny", "t5-tiny"])
def test_a_checkpoint_saved_before_carries_its_sentence_piece_tokenizers(name):
    model = zoo.load(SAVED / f"{name}.keras")
    for side, expected in EXPECTED[name].items():
        _check(getattr(model, side), expected)


def test_a_byte_pair_vocabulary_saved_before_reloads_with_the_same_ids():
    import keras_hub

    expected = EXPECTED["byte_pair"]
    tokenizer = keras_hub.tokenizers.BytePairTokenizer(
        vocabulary=str(SAVED / "byte_pair" / "vocabulary.json"),
        merges=str(SAVED / "byte_pair" / "merges.txt"),
        unsplittable_tokens=expected["reserved_tokens"],
    )
    assert tokenizer.vocabulary_size() == expected["vocabulary_size"]
    assert token_id_lists(tokenizer, EXPECTED["probes"]) == expected["ids"]
    assert [tokenizer.detokenize(np.asarray(ids, "int32")) for ids in expected["ids"]] == EXPECTED["probes"]
