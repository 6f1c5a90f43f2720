"""Text in, text out: zoo.generate on strings (and past the context window,
nanoGPT's way), zoo.translate, zoo.classify and zoo.embed agree with the
token-id level computation; token-id calls are unchanged; misuse gets one
clear line."""

import keras
import numpy as np
import pytest

import zoo
from zoo import generation
from zoo.data import classification_dataset
from zoo.tokenizers import CharTokenizer, WordTokenizer, train_word_piece
from zoo.tokenizers import token_id_lists

TEXT = "ROMEO: But soft, what light through yonder window breaks?\nJULIET: Ay me!\n"
CONTEXT = 8
SENTENCES = ["a dog runs in the park", "two dogs run", "the cat sat on the mat", "a man sleeps"]


@pytest.fixture(scope="module")
def lm():
    keras.utils.set_random_seed(0)
    tokenizer = CharTokenizer.from_text(TEXT)
    # Large weights: every token of the window changes the prediction (at 0.02 an untrained model
    # repeats one character, and a window one token short would go unnoticed).
    return zoo.build(
        "gpt-nano", "causal_lm", vocabulary_size=tokenizer.vocabulary_size(), max_sequence_length=CONTEXT,
        initializer_range=1.0, tokenizer=tokenizer,
    )


@pytest.fixture(scope="module")
def word_piece():
    return train_word_piece(SENTENCES * 3, vocabulary_size=80)


def _decode(tokenizer, ids):
    return tokenizer.detokenize(list(ids))


def _naive_greedy(model, ids, max_length):
    """nanoGPT's sample.py with greedy decoding: every token from a full
    forward pass over the last CONTEXT tokens, no cache."""
    ids = list(ids)
    while len(ids) < max_length:
        window = np.array([ids[-CONTEXT:]], "int32")
        logits = model({"token_ids": window, "padding_mask": np.ones_like(window)}, training=False)
        ids.append(int(np.argmax(keras.ops.convert_to_numpy(logits)[0, -1])))
    return ids


def test_text_generation_is_the_id_level_call_decoded(lm):
    prompts = ["ROMEO:", "JU"]
    ids = token_id_lists(lm.tokenizer, prompts)
    for options in ({"sampler": "greedy"}, {"sampler": "top_k", "top_k": 5, "seed": 3}):
        text = zoo.generate(lm, prompts, max_new_tokens=2, **options)
        expected = zoo.generate(lm, ids, 2, **options)
        assert text == [_decode(lm.tokenizer, row + new) for row, new in zip(ids, expected.sequences)]
    one = zoo.generate(lm, "ROMEO:", max_length=8)  # max_length counts the prompt, as keras-hub's
    assert isinstance(one, str) and len(one) == 8 and one.startswith("ROMEO:")
    assert one == zoo.generate(lm, ["ROMEO:"], max_length=8)[0]


def test_generation_past_the_context_window_is_nanogpt_sampling(lm):
    prompts = ["ROMEO:", "JULIET: Ay me"]  # the second is longer than the context of 8
    expected = [_decode(lm.tokenizer, _naive_greedy(lm, lm.tokenizer(p).tolist(), 30)) for p in prompts]
    assert zoo.generate(lm, prompts, max_length=30) == expected  # every row slides
    assert zoo.generate(lm, prompts[0], max_length=30) == expected[0]  # 2 cached tokens, then slides
    backbone = zoo.models.GPTBackbone.from_config(lm.backbone.get_config())  # logits from its tied embedding
    backbone.set_weights(lm.backbone.get_weights())
    backbone.tokenizer = lm.tokenizer
    assert zoo.generate(backbone, prompts[0], max_length=30) == expected[0]
    assert all(len(text) == 30 for text in expected)


@pytest.mark.parametrize("sampler", ["temperature", "top_k", "top_p"])
def test_sampling_past_the_context_window_is_reproducible_with_a_seed(lm, sampler):
    options = dict(max_length=40, sampler=sampler, top_k=10, top_p=0.9, temperature=1.5)
    first = zoo.generate(lm, "ROMEO:", seed=7, **options)
    assert first == zoo.generate(lm, "ROMEO:", seed=7, **options)
    assert len(first) == 40 and first.startswith("ROMEO:")
    assert zoo.generate(lm, "ROMEO:", seed=8, **options) != first


def test_a_stop_token_ends_text_generation():
    keras.utils.set_random_seed(1)
    tokenizer = WordTokenizer.from_texts(SENTENCES)
    lm = zoo.build("gpt-nano", "causal_lm", vocabulary_size=tokenizer.vocabulary_size(), max_sequence_length=CONTEXT)
    lm.tokenizer = tokenizer
    prompt = tokenizer("a dog").tolist()
    # The model's own greedy continuation, then [END] declared as the token it first produces.
    free = zoo.generate(lm, [prompt], 4).sequences[0]
    stop = int(free[1])
    text = zoo.generate(lm, "a dog", max_new_tokens=20, stop_token_ids=[stop])
    assert text == _decode(tokenizer, prompt + free[: free.index(stop)])  # the stop token ends the text, unwritten


@pytest.mark.parametrize("former, current", [("k", "top_k"), ("p", "top_p")])
def test_the_samplers_former_keywords_are_refused_naming_the_current_ones(lm, former, current):
    message = rf"`{former}` is renamed; pass {current}="
    with pytest.raises(TypeError, match=message):
        zoo.generate(lm, "ROMEO:", max_new_tokens=2, **{former: 1})
    with pytest.raises(TypeError, match=message):
        zoo.generate(lm, [[1, 2]], 2, **{former: 1})
    with pytest.raises(TypeError, match=message):
        zoo.stream(lm, "ROMEO:", max_new_tokens=2, **{former: 1})
    with pytest.raises(TypeError, match=message):
        zoo.text.TextGeneration(lm, [[1, 2]], 2, **{former: 1})


def test_token_id_calls_are_unchanged(lm):
    out = zoo.generate(lm, [[1, 2, 3], [4, 5]], max_new_tokens=3, sampler="top_k", top_k=4, seed=1)
    expected = zoo.generate(lm, [[1, 2, 3], [4, 5]], 3, sampler="top_k", top_k=4, seed=1)
    assert isinstance(out, generation.GenerationOutput)
    assert out.sequences == expected.sequences
    np.testing.assert_array_equal(out.token_ids, expected.token_ids)


def _translation_reference(model, tokenizer, sentences, num_beams, length_penalty=0.6, source_tokenizer=None):
    """The translate recipe's decoding: [START] prompt, sources cut to the
    context, at most min(longest + 10, C - 1) tokens, stop at [END]."""
    vocabulary = tokenizer.get_vocabulary()
    start, end = vocabulary.index("[START]"), vocabulary.index("[END]")
    source_ids = token_id_lists(source_tokenizer or tokenizer, sentences)
    sources = [ids[: model.max_sequence_length] for ids in source_ids]
    result = zoo.generate(
        model,
        [[start]] * len(sources),
        min(max(map(len, sources)) + 10, model.max_sequence_length - 1),
        sampler="beam" if num_beams > 1 else "greedy",
        stop_token_ids=[end],
        source=sources,
        num_beams=num_beams,
        length_penalty=length_penalty,
    )
    texts = []
    for tokens in result.sequences:
        tokens = tokens[: tokens.index(end)] if end in tokens else tokens
        texts.append(_text(tokenizer.detokenize([tokens])) if tokens else "")
    return texts


def _text(value):
    value = value if isinstance(value, list) else keras.ops.convert_to_numpy(value).tolist()
    value = value[0]
    return value.decode("utf-8") if isinstance(value, bytes) else value


def test_translate_decodes_as_the_recipes(word_piece):
    sentences = ["a dog runs", "the cat sat on the mat"]  # one length per batch shape: sorted, one call
    keras.utils.set_random_seed(2)
    words = WordTokenizer.from_texts(SENTENCES)
    demo = zoo.build("transformer-tiny", vocabulary_size=words.vocabulary_size(), max_sequence_length=12, tokenizer=words)
    assert zoo.translate(demo, sentences, num_beams=1) == _translation_reference(demo, words, sentences, 1)
    model = zoo.build(
        "transformer-tiny", vocabulary_size=word_piece.vocabulary_size(), max_sequence_length=12, tokenizer=word_piece
    )
    translations = zoo.translate(model, sentences, num_beams=2)
    assert translations == _translation_reference(model, word_piece, sentences, 2)
    assert all(isinstance(t, str) for t in translations)
    english, german = WordTokenizer.from_texts(SENTENCES), WordTokenizer.from_texts(["ein hund läuft", "zwei hunde"])
    two = zoo.build(
        "transformer-tiny", vocabulary_size=german.vocabulary_size(), source_vocabulary_size=english.vocabulary_size(),
        share_embeddings=False, max_sequence_length=12, tokenizer=german, source_tokenizer=english,
    )
    expected = _translation_reference(two, german, sentences, 1, source_tokenizer=english)
    assert zoo.translate(two, sentences, num_beams=1) == expected


def test_classify_and_embed_agree_with_the_recipe_pipeline(word_piece):
    sentences = SENTENCES[:3]
    ids = token_id_lists(word_piece, sentences)
    vocabulary = word_piece.get_vocabulary()
    keras.utils.set_random_seed(3)
    classifier = zoo.build(
        "bert-tiny", "classifier", vocabulary_size=len(vocabulary), num_classes=3, max_sequence_length=16,
        tokenizer=word_piece,
    )
    # bert_classify's packing ([CLS] ids [SEP], padded to the sequence length), then a float64 softmax.
    inputs, _ = next(iter(classification_dataset(
        ids, [0, 1, 2], 3, 16, vocabulary.index("[CLS]"), vocabulary.index("[SEP]"), shuffle=False
    )))
    logits = keras.ops.convert_to_numpy(classifier({k: np.asarray(v).astype("int32") for k, v in inputs.items()}))
    logits = logits.astype("float64")
    expected = np.exp(logits - logits.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    result = zoo.classify(classifier, sentences, label_names=["sad", "neutral", "happy"])
    np.testing.assert_allclose(result.probabilities, expected, atol=1e-5)
    assert result.labels == [["sad", "neutral", "happy"][i] for i in expected.argmax(-1)]
    assert zoo.classify(classifier, sentences).labels == expected.argmax(-1).tolist()

    encoder = zoo.build("bert-tiny", "sentence_encoder", vocabulary_size=len(vocabulary), max_sequence_length=16)
    encoder.tokenizer = word_piece
    vectors = zoo.embed(encoder, sentences)
    packed = {k: np.asarray(v).astype("int32") for k, v in inputs.items()}
    np.testing.assert_allclose(vectors, keras.ops.convert_to_numpy(encoder(packed)), atol=1e-5)
    assert vectors.shape == (3, encoder.backbone.hidden_dim)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=-1), 1.0, atol=1e-5)


def test_misuse_gets_one_clear_line(lm, word_piece):
    bare = zoo.build("gpt-nano", "causal_lm", vocabulary_size=20)
    with pytest.raises(ValueError, match="carries no tokenizer; pass token ids or attach one with model.tokenizer ="):
        zoo.generate(bare, "hello", max_length=10)
    with pytest.raises(ValueError, match="one of `max_length`.*or `max_new_tokens`"):
        zoo.generate(lm, "ROMEO:")
    with pytest.raises(ValueError, match="`max_length`=4 leaves no new token after a prompt of 6 tokens"):
        zoo.generate(lm, "ROMEO:", max_length=4)
    with pytest.raises(ValueError, match="sampler='beam' generates within the model's context of 8 tokens"):
        zoo.generate(lm, "ROMEO:", max_length=20, sampler="beam")
    with pytest.raises(ValueError, match="Unknown sampler 'nucleus'"):
        zoo.generate(lm, "ROMEO:", max_length=20, sampler="nucleus")
    with pytest.raises(ValueError, match="character 'Z' at position 0 is not in the vocabulary"):
        zoo.generate(lm, "Zebra", max_length=20)
    with pytest.raises(ValueError, match="zoo.translate needs an EncoderDecoder; got a GPTCausalLM"):
        zoo.translate(lm, ["ROMEO"])
    with pytest.raises(ValueError, match="zoo.classify needs a BertClassifier; got a GPTCausalLM"):
        zoo.classify(lm, ["ROMEO"])
    with pytest.raises(ValueError, match="zoo.embed needs a BertSentenceEncoder"):
        zoo.embed(lm, ["ROMEO"])
    seq2seq = zoo.build("transformer-tiny", vocabulary_size=word_piece.vocabulary_size(), tokenizer=word_piece)
    with pytest.raises(ValueError, match="EncoderDecoder's text decodes greedily or samples; its beam search is"):
        zoo.generate(seq2seq, "a dog", max_length=5, sampler="beam")
    with pytest.raises(ValueError, match=r"takes a list of sentences; got one str \(wrap it"):
        zoo.translate(seq2seq, "a dog")
    with pytest.raises(ValueError, match="`max_length` counts the tokens of a text prompt"):
        zoo.generate(lm, [[1, 2]], max_length=5)
