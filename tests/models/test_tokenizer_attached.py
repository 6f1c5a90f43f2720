"""Models carry their tokenizer: `tokenizer=` in any zoo model (or
`model.tokenizer = ...`), saved inside the `.keras` file with its vocabulary
as an asset, back with `zoo.load` and `keras.saving.load_model`; each kind
(char, word, WordPiece, byte-pair, keras-hub's BERT and GPT-2 tokenizers)
tokenizes the same after the round trip."""

import functools
import zipfile

import keras
import numpy as np
import pytest

import zoo
from zoo.tokenizers import CharTokenizer, CharVocabulary, WordTokenizer, WordVocabulary, train_byte_pair, train_word_piece
from zoo.tokenizers import token_id_lists

SENTENCES = [
    "the cat sat on the mat",
    "a dog runs in the park",
    "zwei hunde laufen über die straße",
    "the quick brown fox jumps over the lazy dog",
]
PROBES = ["the cat runs", "über die straße", "naïve café façade", "a dog"]  # unseen words, non-ASCII
# keras-hub's WordPiece and byte-pair tokenizers run on tensorflow-text (a GPU machine may have no TensorFlow).
TF_TEXT = "keras-hub's WordPiece and byte-pair tokenizers need TensorFlow, which is not installed"


def _char():
    return CharTokenizer.from_text(" ".join(SENTENCES) + "ïçé")


def _word():
    return WordTokenizer.from_texts(SENTENCES)


@functools.cache  # trained once per module
def _word_piece():
    pytest.importorskip("tensorflow", reason=TF_TEXT)
    return train_word_piece(SENTENCES * 3, vocabulary_size=120)


@functools.cache  # trained once per module
def _byte_pair():
    pytest.importorskip("tensorflow", reason=TF_TEXT)
    return train_byte_pair(SENTENCES * 3, vocabulary_size=300)


def _bert():
    import keras_hub

    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(set(" ".join(SENTENCES).split()))
    return keras_hub.models.BertTokenizer(vocabulary=tokens)


def _gpt2():
    import keras_hub

    bpe = _byte_pair()
    vocabulary = {token: i for i, token in enumerate(bpe.get_vocabulary())}
    vocabulary["<|endoftext|>"] = len(vocabulary)
    return keras_hub.models.GPT2Tokenizer(vocabulary=vocabulary, merges=list(bpe.merges))


KINDS = {"char": _char, "word": _word, "word_piece": _word_piece, "byte_pair": _byte_pair, "bert": _bert, "gpt2": _gpt2}
PROBE_FOR = {"char": PROBES, "word": PROBES, "bert": ["the cat runs", "a dog"]}  # WordPiece / BPE: all probes


def _lm(tokenizer, **kwargs):
    return zoo.build("gpt-nano", "causal_lm", vocabulary_size=tokenizer.vocabulary_size(), tokenizer=tokenizer, **kwargs)


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_tokenizer_kind_round_trips_inside_the_keras_file(kind, tmp_path):
    tokenizer = KINDS[kind]()
    model = _lm(tokenizer)
    path = zoo.save(model, tmp_path / "model.keras")
    assert any(name.startswith("assets/") for name in zipfile.ZipFile(path).namelist())  # the vocabulary is inside
    probes = PROBE_FOR.get(kind, PROBES)
    expected = token_id_lists(tokenizer, probes)
    for loaded in (zoo.load(path), keras.saving.load_model(path)):
        assert type(loaded.tokenizer) is type(tokenizer)
        assert loaded.tokenizer is not tokenizer
        assert loaded.tokenizer.get_vocabulary() == tokenizer.get_vocabulary()
        assert token_id_lists(loaded.tokenizer, probes) == expected
        ids = expected[0]
        np.testing.assert_array_equal(
            keras.ops.convert_to_numpy(loaded.tokenizer.detokenize([ids])),
            keras.ops.convert_to_numpy(tokenizer.detokenize([ids])),
        )


def test_the_model_is_the_same_with_or_without_a_tokenizer(tmp_path):
    tokenizer = _word()
    keras.utils.set_random_seed(0)
    without = zoo.build("gpt-nano", "causal_lm", vocabulary_size=tokenizer.vocabulary_size())
    keras.utils.set_random_seed(0)
    with_tokenizer = _lm(tokenizer)
    assert [type(layer) for layer in with_tokenizer.layers] == [type(layer) for layer in without.layers]
    assert len(with_tokenizer.weights) == len(without.weights)
    assert "tokenizer" not in without.get_config()
    assert with_tokenizer.get_config()["tokenizer"]["class_name"] == "WordTokenizer"
    x = {"token_ids": np.array([[4, 5, 6]], "int32"), "padding_mask": np.ones((1, 3), "int32")}
    np.testing.assert_array_equal(with_tokenizer(x), without(x))
    loaded = zoo.load(zoo.save(with_tokenizer, tmp_path / "model.keras"))
    np.testing.assert_array_equal(loaded(x), with_tokenizer(x))


def test_a_tokenizer_attached_after_construction_is_saved_and_can_be_removed(tmp_path):
    tokenizer = _char()
    model = zoo.build("gpt-nano", "causal_lm", vocabulary_size=tokenizer.vocabulary_size())
    assert model.tokenizer is None
    model.tokenizer = tokenizer
    loaded = zoo.load(zoo.save(model, tmp_path / "with.keras"))
    assert loaded.tokenizer.get_vocabulary() == tokenizer.get_vocabulary()
    loaded.tokenizer = None
    assert zoo.load(zoo.save(loaded, tmp_path / "without.keras")).tokenizer is None


def test_a_bert_task_carries_a_word_piece_tokenizer(tmp_path):
    tokenizer = _word_piece()
    model = zoo.build("bert-tiny", "classifier", vocabulary_size=tokenizer.vocabulary_size(), tokenizer=tokenizer)
    loaded = zoo.load(zoo.save(model, tmp_path / "model.keras"))
    assert token_id_lists(loaded.tokenizer, PROBES) == token_id_lists(tokenizer, PROBES)


def test_an_encoder_decoder_carries_a_word_tokenizer(tmp_path):
    tokenizer = _word()
    model = zoo.build("transformer-tiny", vocabulary_size=tokenizer.vocabulary_size(), tokenizer=tokenizer)
    loaded = keras.saving.load_model(zoo.save(model, tmp_path / "model.keras"))
    assert loaded.tokenizer.get_vocabulary() == tokenizer.get_vocabulary()


def test_an_encoder_decoder_with_two_vocabularies_carries_both_tokenizers(tmp_path):
    source, target = WordTokenizer.from_texts(SENTENCES[:2]), WordTokenizer.from_texts(SENTENCES[2:])
    model = zoo.build(
        "transformer-tiny",
        vocabulary_size=target.vocabulary_size(),
        source_vocabulary_size=source.vocabulary_size(),
        share_embeddings=False,
        tokenizer=target,
        source_tokenizer=source,
    )
    loaded = zoo.load(zoo.save(model, tmp_path / "model.keras"))
    assert loaded.tokenizer.get_vocabulary() == target.get_vocabulary()
    assert loaded.source_tokenizer.get_vocabulary() == source.get_vocabulary() != target.get_vocabulary()
    with pytest.raises(ValueError, match="source_tokenizer: a GPTCausalLM has no source"):
        zoo.build("gpt-nano", "causal_lm", vocabulary_size=20).source_tokenizer = source


def test_a_tokenizer_with_more_ids_than_the_model_embeds_is_refused():
    tokenizer = _char()
    with pytest.raises(ValueError, match=rf"tokenizer: it has {tokenizer.vocabulary_size()} token ids.*embeds only 5"):
        zoo.build("gpt-nano", "causal_lm", vocabulary_size=5, tokenizer=tokenizer)
    model = zoo.build("gpt-nano", "causal_lm", vocabulary_size=tokenizer.vocabulary_size() + 3)
    model.tokenizer = tokenizer  # fewer ids than the embedding (a padded table) is fine
    with pytest.raises(ValueError, match="tokenizer: it has .* but EncoderDecoder embeds only 5"):
        zoo.models.EncoderDecoder(vocabulary_size=5, num_layers=1, num_heads=2, hidden_dim=8, tokenizer=tokenizer)


def test_something_that_is_not_a_tokenizer_is_refused():
    model = zoo.build("gpt-nano", "causal_lm", vocabulary_size=20)
    with pytest.raises(TypeError, match="tokenizer: expected a keras-hub tokenizer.*got CharVocabulary"):
        model.tokenizer = CharVocabulary("abc")


def test_char_and_word_tokenizers_match_the_vocabularies():
    text = "To be, or not to be: that is the question.\n"
    chars, vocabulary = CharTokenizer.from_text(text), CharVocabulary.from_text(text)
    np.testing.assert_array_equal(chars(text), vocabulary.encode(text))
    assert chars.detokenize(chars(text)) == text
    assert chars.detokenize([chars("to"), chars("be")]) == ["to", "be"]
    assert chars.vocabulary_size() == vocabulary.vocabulary_size == len(chars.get_vocabulary())
    assert chars.id_to_token(chars.token_to_id("q")) == "q"
    words, word_vocabulary = WordTokenizer.from_texts(SENTENCES), WordVocabulary.from_texts(SENTENCES)
    assert words("the cat flies").tolist() == word_vocabulary.encode("the cat flies")  # "flies" is [UNK]
    ids = [words.start_token_id] + word_vocabulary.encode("the cat") + [words.end_token_id, words.pad_token_id]
    assert words.detokenize(ids) == word_vocabulary.decode(ids) == "the cat"
    assert [t.tolist() for t in words(["a dog", "the mat"])] == [word_vocabulary.encode(s) for s in ["a dog", "the mat"]]
    with pytest.raises(ValueError, match="character 'Z' at position 0 is not in the vocabulary"):
        chars("Zebra")
