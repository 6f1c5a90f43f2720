"""`train_sentence_piece`: a cased subword vocabulary in SentencePiece's
scheme, trained with the `tokenizers` package. Invariants: detokenize
inverts tokenize (case, punctuation and non-ASCII kept), the reserved
tokens take the first ids and tokenizing adds none of them, bad arguments
are refused in one line, and the tokenizer travels inside a `.keras` file
and gives `zoo.translate` cased, detokenized text."""

import functools
import json

import pytest

import zoo
from zoo.tokenizers import HuggingFaceTokenizer, train_sentence_piece

CORPUS = [
    "Ein Mann fährt Fahrrad.",
    "A man is riding a bicycle.",
    "Zwei Hunde spielen im Schnee, nicht im Gras.",
    "Two dogs are playing in the snow, not in the grass.",
    "Eine Frau mit einem T-Shirt läuft über die Straße.",
    "A woman in a T-shirt runs across the street.",
    "Der Junge trägt die Tasche seiner Mutter.",
    "The boy carries his mother's bag.",
] * 4
UNSEEN = ["A dog runs.", "Zwei Männer, eine Straße.", "The woman's T-shirt is red."]


@functools.cache
def trained(algorithm):
    return train_sentence_piece(CORPUS, 120, algorithm)


@pytest.mark.parametrize("algorithm", ["unigram", "bpe"])
def test_detokenize_gives_the_cased_text_back(algorithm):
    tokenizer = trained(algorithm)
    for text in CORPUS[:8] + UNSEEN:
        ids = tokenizer(text)
        assert tokenizer.detokenize(ids) == text
    assert list(tokenizer("A man")) != list(tokenizer("a man"))  # case is kept, not folded
    assert tokenizer.vocabulary_size() <= 120


@pytest.mark.parametrize("algorithm", ["unigram", "bpe"])
def test_the_reserved_tokens_come_first_and_tokenizing_adds_none(algorithm):
    tokenizer = trained(algorithm)
    assert tokenizer.get_vocabulary()[:4] == ["[PAD]", "[UNK]", "[START]", "[END]"]
    assert (tokenizer.pad_token_id, tokenizer.start_token_id, tokenizer.end_token_id) == (0, 2, 3)
    ids = [int(i) for i in tokenizer("A man is riding a bicycle.")]
    assert not {0, 1, 2, 3} & set(ids)
    assert tokenizer.detokenize([2] + ids + [3, 0, 0]) == "A man is riding a bicycle."  # specials skipped


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(algorithm="wordpiece"), r"algorithm: expected one of unigram, bpe; got 'wordpiece'"),
        (dict(vocabulary_size=4), r"vocabulary_size: expected an int above the 4 reserved tokens; got 4"),
        (dict(reserved_tokens=("[PAD]", "[UNK]", "[START]")), r"must start with '\[PAD\]' \(id 0\) and hold"),
        (dict(reserved_tokens=("[UNK]", "[PAD]", "[START]", "[END]")), r"must start with '\[PAD\]'"),
    ],
)
def test_bad_arguments_are_refused_in_one_line(kwargs, message):
    arguments = {"texts": CORPUS, "vocabulary_size": 100, **kwargs}
    with pytest.raises(ValueError, match=message):
        train_sentence_piece(**arguments)


def test_an_encoder_decoder_carries_it_and_translates_to_detokenized_text(tmp_path):
    tokenizer = trained("unigram")
    model = zoo.build("transformer-tiny", vocabulary_size=tokenizer.vocabulary_size(), tokenizer=tokenizer)
    loaded = zoo.load(zoo.save(model, tmp_path / "model.keras"))
    assert isinstance(loaded.tokenizer, HuggingFaceTokenizer)
    for text in UNSEEN:
        assert list(loaded.tokenizer(text)) == list(tokenizer(text))
    (translation,) = zoo.translate(loaded, ["Ein Mann fährt Fahrrad."], num_beams=2, max_length=8)
    assert isinstance(translation, str) and "▁" not in translation  # the pieces' space marks are decoded
    assert translation == zoo.translate(model, ["Ein Mann fährt Fahrrad."], num_beams=2, max_length=8)[0]


def test_a_cached_vocabulary_is_read_back_and_new_texts_or_settings_train_again(tmp_path):
    first = train_sentence_piece(CORPUS, 120, cache=tmp_path)
    (kept,) = tmp_path.glob("*.json")
    assert json.loads(kept.read_text(encoding="utf-8"))["model"]["vocab"] == json.loads(first._json)["model"]["vocab"]
    # The second call reads the file rather than training: a piece's score
    # changed in the file is the score the tokenizer gets.
    saved = json.loads(kept.read_text(encoding="utf-8"))
    saved["model"]["vocab"][10][1] = -0.125
    kept.write_text(json.dumps(saved), encoding="utf-8")
    again = train_sentence_piece(CORPUS, 120, cache=tmp_path)
    assert json.loads(again._json)["model"]["vocab"][10][1] == -0.125
    assert again.get_vocabulary() == first.get_vocabulary()
    assert (again.pad_token_id, again.start_token_id, again.end_token_id) == (0, 2, 3)
    # Other texts, another size or another algorithm: a vocabulary of its own.
    train_sentence_piece(CORPUS[:-1], 120, cache=tmp_path)
    train_sentence_piece(CORPUS, 110, cache=tmp_path)
    train_sentence_piece(CORPUS, 120, "bpe", cache=tmp_path)
    assert len(list(tmp_path.glob("*.json"))) == 4
