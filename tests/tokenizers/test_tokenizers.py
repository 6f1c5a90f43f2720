"""Tokenizers: round trips, padding id 0, save / load, error messages."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zoo.data import DataError
from zoo.tokenizers import CharVocabulary, WordVocabulary, load_word_piece, save_vocabulary, train_byte_pair, train_word_piece

CORPUS = [
    "The cat danced on the mat.",
    "A small dog slept in the old house.",
    "Two young children are playing outside!",
    "The dogs danced and the cats slept, again and again.",
    "Nobody expected the Spanish inquisition.",
] * 4


# CharVocabulary


@settings(max_examples=50, deadline=None)
@given(st.text(min_size=1, max_size=200))
def test_char_vocabulary_round_trip(text):
    vocabulary = CharVocabulary.from_text(text)
    ids = vocabulary.encode(text)
    assert ids.dtype == np.int32 and ids.shape == (len(text),)
    assert vocabulary.decode(ids) == text
    assert vocabulary.vocabulary_size == len(set(text))


def test_char_vocabulary_is_the_sorted_set_as_nanogpt():
    vocabulary = CharVocabulary.from_text("hello\n")
    assert vocabulary.characters == ["\n", "e", "h", "l", "o"]
    np.testing.assert_array_equal(vocabulary.encode("hell"), [2, 1, 3, 3])


def test_char_vocabulary_unknown_character_is_named():
    vocabulary = CharVocabulary.from_text("abc")
    with pytest.raises(DataError, match="'z' at position 2"):
        vocabulary.encode("abzc")
    with pytest.raises(DataError, match="'é' at position 0"):
        vocabulary.encode("é")  # a code point beyond the lookup table


def test_char_vocabulary_decode_out_of_range():
    with pytest.raises(DataError, match=r"\[0, 3\)"):
        CharVocabulary.from_text("abc").decode([0, 3])


def test_char_vocabulary_save_load(tmp_path):
    vocabulary = CharVocabulary.from_text("To be, or not to be:\nthat is the question.")
    vocabulary.save(tmp_path / "chars.json")
    loaded = CharVocabulary.load(tmp_path / "chars.json")
    assert loaded.characters == vocabulary.characters
    np.testing.assert_array_equal(loaded.encode("to be"), vocabulary.encode("to be"))


def test_char_vocabulary_load_bad_file(tmp_path):
    path = tmp_path / "chars.json"
    path.write_text(json.dumps({"chars": ["a"]}))
    with pytest.raises(DataError, match="chars.json.*'characters'"):
        CharVocabulary.load(path)
    with pytest.raises(DataError, match="missing.json.*does not exist"):
        CharVocabulary.load(tmp_path / "missing.json")


# WordVocabulary


def test_word_vocabulary_encode_decode(tmp_path):
    vocabulary = WordVocabulary.from_texts(["the cat danced", "the dog"])
    assert vocabulary.tokens[:4] == ["[PAD]", "[START]", "[END]", "[UNK]"]
    assert vocabulary.pad_id == 0
    ids = vocabulary.encode("the dog danced")
    assert vocabulary.decode(ids) == "the dog danced"
    assert vocabulary.encode("the zebra")[1] == vocabulary.unk_id
    # Start and padding are skipped; decoding stops at the end token.
    generated = [vocabulary.start_id] + ids + [vocabulary.end_id] + ids + [0, 0]
    assert vocabulary.decode(generated) == "the dog danced"
    vocabulary.save(tmp_path / "words.json")
    assert WordVocabulary.load(tmp_path / "words.json").tokens == vocabulary.tokens


# WordPiece (keras-hub)


@pytest.fixture(scope="module")
def word_piece():
    return train_word_piece(CORPUS, vocabulary_size=120)


def test_word_piece_reserved_tokens_first(word_piece):
    vocabulary = word_piece.get_vocabulary()
    assert vocabulary[0] == "[PAD]"
    assert vocabulary[:7] == ["[PAD]", "[UNK]", "[START]", "[END]", "[MASK]", "[CLS]", "[SEP]"]
    assert word_piece.vocabulary_size() <= 120
    assert word_piece.token_to_id("[PAD]") == 0


def test_word_piece_lowercases_and_round_trips(word_piece):
    ids = np.asarray(word_piece("The small cat danced again."))
    assert ids.dtype == np.int32
    assert word_piece.detokenize(ids) == "the small cat danced again ."


def test_word_piece_save_load_decodes_the_same(word_piece, tmp_path):
    path = tmp_path / "vocabulary.txt"
    save_vocabulary(word_piece, path)
    loaded = load_word_piece(path, lowercase=True)
    assert loaded.get_vocabulary() == word_piece.get_vocabulary()
    text = "Two dogs expected the inquisition, unexpectedly!"
    ids = np.asarray(word_piece(text))
    np.testing.assert_array_equal(np.asarray(loaded(text)), ids)
    assert loaded.detokenize(ids) == word_piece.detokenize(ids)


def test_word_piece_requires_pad_first():
    with pytest.raises(ValueError, match=r"\[PAD\]"):
        train_word_piece(CORPUS, 100, reserved_tokens=("[UNK]", "[PAD]"))


def test_load_word_piece_bad_file(tmp_path):
    path = tmp_path / "vocabulary.txt"
    path.write_text("[UNK]\n[PAD]\n")
    with pytest.raises(DataError, match=r"vocabulary.txt, line 1: expected '\[PAD\]'"):
        load_word_piece(path)


# Byte-pair (the `tokenizers` package's trainer, keras-hub's tokenizer)


@pytest.fixture(scope="module")
def byte_pair():
    return train_byte_pair(CORPUS, vocabulary_size=300)


def test_byte_pair_vocabulary_layout(byte_pair):
    vocabulary = byte_pair.vocabulary
    assert [byte_pair.id_to_token(i) for i in range(3)] == ["[PAD]", "[START]", "[END]"]
    assert sorted(vocabulary.values()) == list(range(300))
    assert len(vocabulary) == 300
    assert len(byte_pair.merges) == 300 - 3 - 256  # after the reserved tokens and the bytes, one token per merge
    byte_characters = [byte_pair.id_to_token(i) for i in range(3, 259)]
    assert byte_characters == sorted(byte_characters) and all(len(c) == 1 for c in byte_characters)
    assert [byte_pair.id_to_token(259 + i) for i in range(41)] == [m.replace(" ", "") for m in byte_pair.merges]


def test_byte_pair_round_trip_any_text(byte_pair):
    # Bytes are all in the vocabulary: unseen words and scripts round trip.
    for text in ["The cat danced on the mat.", "Zebras & naïve façades, 42 €"]:
        ids = np.asarray(byte_pair(text))
        assert byte_pair.detokenize(ids) == text


def test_byte_pair_merges_frequent_words(byte_pair):
    # "the" is frequent in the corpus: it must be one token, not three bytes.
    assert len(np.asarray(byte_pair(" the"))) == 1


def test_byte_pair_keeps_reserved_tokens_whole(byte_pair):
    ids = np.asarray(byte_pair("the cat[END]")).tolist()
    assert ids[-1] == byte_pair.token_to_id("[END]") == 2


def test_byte_pair_is_deterministic_and_reloads(byte_pair, tmp_path):
    again = train_byte_pair(CORPUS, vocabulary_size=300)
    assert again.merges == byte_pair.merges
    assert again.vocabulary == byte_pair.vocabulary
    import keras_hub

    byte_pair.save_assets(str(tmp_path))
    loaded = keras_hub.tokenizers.BytePairTokenizer(
        vocabulary=str(tmp_path / "vocabulary.json"),
        merges=str(tmp_path / "merges.txt"),
        unsplittable_tokens=["[PAD]", "[START]", "[END]"],
    )
    text = "Two small dogs danced[END]"
    np.testing.assert_array_equal(np.asarray(loaded(text)), np.asarray(byte_pair(text)))


# Words counted by hand (each text one word, so no space marks): "a b" is
# in 5 + 3 words, then "ab c" in 3, and "b c" in 1 only.
BY_HAND = ["ab"] * 5 + ["abc"] * 3 + ["bc"]


def _learned(tokenizer):
    return [tokenizer.id_to_token(i) for i in range(259, tokenizer.vocabulary_size())]


def test_byte_pair_learns_the_merges_counted_by_hand():
    tokenizer = train_byte_pair(BY_HAND, vocabulary_size=1000)
    assert tokenizer.merges == ["a b", "ab c"]  # "b c" is rarer than min_frequency=2
    assert _learned(tokenizer) == ["ab", "abc"]
    assert np.asarray(tokenizer("abc ab")).tolist() == [260, tokenizer.token_to_id("Ġ"), 259]
    everything = train_byte_pair(BY_HAND, vocabulary_size=1000, min_frequency=1)
    assert everything.merges == ["a b", "ab c", "b c"]


def test_byte_pair_stops_at_the_vocabulary_size():
    for size in (260, 261):
        tokenizer = train_byte_pair(BY_HAND, vocabulary_size=size)
        assert tokenizer.vocabulary_size() == size
        assert tokenizer.merges == ["a b", "ab c"][:size - 259]


def test_byte_pair_never_merges_into_reserved_tokens():
    # "[END]" written in the texts is kept whole, not counted: the same merges as without it.
    tokenizer = train_byte_pair([text + "[END]" for text in BY_HAND] * 4, vocabulary_size=1000)
    assert tokenizer.merges == train_byte_pair(BY_HAND * 4, vocabulary_size=1000).merges
    assert not any("[" in token or "]" in token for token in _learned(tokenizer))


def test_byte_pair_vocabulary_too_small():
    for size in (100, 259):
        with pytest.raises(ValueError, match=r"at least 260 \(the reserved tokens, 256 bytes and one merge\), got"):
            train_byte_pair(CORPUS, vocabulary_size=size)


def test_byte_pair_without_a_frequent_pair_is_one_line():
    with pytest.raises(ValueError, match="no pair of symbols occurs 2 times in the 1 texts; expected more text"):
        train_byte_pair(["ab"], vocabulary_size=300)
