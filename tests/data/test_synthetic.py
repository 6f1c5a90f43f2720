"""Synthetic tasks: correct targets, determinism, a grammar that agrees."""

import numpy as np
import pytest

from zoo.data import (
    copy_task,
    held_out_split,
    reverse_task,
    sort_task,
    toy_translation,
    toy_translation_pairs,
)


@pytest.mark.parametrize(
    "task, transform",
    [
        (copy_task, lambda x: x),
        (reverse_task, lambda x: x[:, ::-1]),
        (sort_task, lambda x: np.sort(x, axis=1)),
    ],
)
def test_digit_tasks(task, transform):
    source, target, vocabulary = task(num_examples=50, sequence_length=7, seed=0)
    assert source.shape == target.shape == (50, 7)
    assert source.dtype == target.dtype == np.int32
    np.testing.assert_array_equal(target, transform(source))
    # Digits only: never pad, start, end or unknown.
    assert source.min() >= 4 and source.max() < vocabulary.vocabulary_size
    assert vocabulary.decode(source[0]).replace(" ", "").isdigit()
    again = task(num_examples=50, sequence_length=7, seed=0)
    np.testing.assert_array_equal(again.source_ids, source)
    assert not np.array_equal(task(50, 7, seed=1).source_ids, source)


def test_toy_grammar_examples_and_size():
    pairs = dict(toy_translation_pairs())
    assert len(pairs) == 10_560
    assert pairs["the cat danced"] == "die Katze tanzte"
    assert pairs["the small dog slept"] == "der kleine Hund schlief"
    assert pairs["a small child sang again"] == "ein kleines Kind sang wieder"
    assert pairs["a tired dog ran"] == "ein müder Hund lief"
    assert pairs["a big cat swam today"] == "eine große Katze schwamm heute"


def test_toy_grammar_agreement():
    # The determiner fixes the adjective's ending: -e after der/die/das and
    # eine, -er after a masculine ein, -es after a neuter ein.
    for english, german in toy_translation_pairs():
        words = german.split()
        if len(english.split()) < len(words) or words[1][0].isupper():
            continue  # no adjective
        determiner, adjective, noun = words[:3]
        ending = {"der": "e", "die": "e", "das": "e", "eine": "e"}.get(determiner)
        if determiner == "ein":
            ending = "es" if noun in {"Kind", "Pferd", "Mädchen", "Schaf"} else "er"
        assert adjective.endswith(ending) and not adjective.endswith("e" + ending), german


def test_toy_translation_distinct_and_deterministic():
    english, german = toy_translation(500, seed=0)
    assert len(english) == len(german) == len(set(english)) == 500
    assert toy_translation(500, seed=0) == (english, german)
    assert toy_translation(500, seed=1)[0] != english
    with pytest.raises(ValueError, match="10560"):
        toy_translation(20_000)


def test_held_out_split_never_shares_a_sentence():
    english, german = toy_translation(400, seed=0)
    english, german = english + english[:50], german + german[:50]  # repeats
    (train_en, train_de), (test_en, test_de) = held_out_split(english, german, 0.2, seed=0)
    assert len(train_en) + len(test_en) == 450
    assert not set(train_en) & set(test_en)
    assert len(set(test_en)) == 80
    pairs = dict(zip(english, german))
    assert all(pairs[e] == d for e, d in zip(test_en, test_de))
