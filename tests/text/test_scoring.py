"""zoo.score and zoo.score_rolling against a float64 NumPy reference: the
model's logits from a plain forward pass of each sequence alone,
log-softmax in float64; batching, bucketing and padding change nothing;
text and token ids agree; left-truncation keeps the last tokens; the
encoder-decoder scores its target with teacher forcing; every token of a
rolling score is scored once."""

import inspect
import re

import keras
import numpy as np
import pytest

import zoo
from zoo import generation
from zoo.tokenizers import CharTokenizer, WordTokenizer
from zoo.tokenizers import token_id_lists

TEXT = "ROMEO: But soft, what light through yonder window breaks?\nJULIET: Ay me!\n"
WINDOW = 16
SENTENCES = ["a dog runs in the park", "two dogs run", "the cat sat on the mat", "a man sleeps"]


@pytest.fixture(scope="module")
def lm():
    keras.utils.set_random_seed(0)
    tokenizer = CharTokenizer.from_text(TEXT)
    # Large weights: the log-probabilities differ from token to token and position to position.
    return zoo.build(
        "gpt-nano", "causal_lm", vocabulary_size=tokenizer.vocabulary_size(), max_sequence_length=WINDOW,
        initializer_range=0.5, tokenizer=tokenizer,
    )


@pytest.fixture(scope="module")
def translator():
    keras.utils.set_random_seed(0)
    english, german = WordTokenizer.from_texts(SENTENCES), WordTokenizer.from_texts(["ein hund läuft im park", "zwei hunde"])
    return zoo.build(
        "transformer-tiny", vocabulary_size=german.vocabulary_size(), source_vocabulary_size=english.vocabulary_size(),
        share_embeddings=False, max_sequence_length=12, tokenizer=german, source_tokenizer=english,
    )


def _log_softmax(logits):
    logits = np.asarray(logits, "float64")
    logits = logits - logits.max(axis=-1, keepdims=True)
    return logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))


def _reference(lm, context, continuation):
    """(per-token log-probabilities, greedy flags) of the continuation, from
    one forward pass over the last W + 1 tokens alone, in float64."""
    tokens = (list(context) + list(continuation))[-(lm.max_sequence_length + 1):]
    logits = keras.ops.convert_to_numpy(lm({"token_ids": np.array([tokens[:-1]], "int32")}, training=False))[0]
    scored = slice(len(tokens) - 1 - len(continuation), len(tokens) - 1)
    logprobs = _log_softmax(logits[scored])
    targets = np.array(tokens[1:])[scored]
    return logprobs[np.arange(len(targets)), targets], logits[scored].argmax(-1) == targets, logprobs


def _greedy(lm, context, steps):
    tokens = list(context)
    for _ in range(steps):
        logits = keras.ops.convert_to_numpy(lm({"token_ids": np.array([tokens], "int32")}, training=False))[0, -1]
        tokens.append(int(logits.argmax()))
    return tokens[len(context):]


PAIRS = [([3, 5, 7], [9, 2]), ([4], [6, 6, 6, 1]), ([1, 2, 3, 4, 5, 6, 7, 8, 9], [10]), ([11, 12], [13, 14, 15, 16, 17])]


def test_score_matches_float64_reference(lm):
    contexts, continuations = [p[0] for p in PAIRS], [p[1] for p in PAIRS]
    scores = zoo.score(lm, contexts, continuations, batch_size=2, top_logprobs=3)
    for (context, continuation), score in zip(PAIRS, scores):
        expected, greedy, logprobs = _reference(lm, context, continuation)
        np.testing.assert_allclose(score.token_logprobs, expected, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(score.logprob, expected.sum(), rtol=1e-5, atol=1e-4)
        assert score.is_greedy == bool(greedy.all())
        assert score.token_ids.tolist() == continuation
        assert score.context_length == len(context)
        top = np.argsort(-logprobs, axis=-1)[:, :3]
        np.testing.assert_array_equal(score.top_ids, top)
        np.testing.assert_allclose(score.top_logprobs, np.take_along_axis(logprobs, top, -1), rtol=1e-5, atol=1e-5)
        assert score.tokens == tuple(lm.tokenizer.detokenize([t]) for t in continuation)


def test_greedy_flag_follows_the_argmax(lm):
    context = [3, 5, 7, 9]
    greedy = _greedy(lm, context, 4)
    changed = greedy[:2] + [(greedy[2] + 1) % lm.vocabulary_size] + greedy[3:]
    first, second = zoo.score(lm, [context, context], [greedy, changed])
    assert first.is_greedy and not second.is_greedy
    # The positions before the changed token are still the argmax.
    assert zoo.score(lm, [context], [changed[:2]])[0].is_greedy


def test_batching_and_padding_change_nothing(lm):
    alone = zoo.score(lm, [[3, 5]], [[7]], batch_size=1)[0]
    longer = [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]] * 5
    together = zoo.score(lm, longer[:2] + [[3, 5]] + longer[2:], [[4, 2]] * 2 + [[7]] + [[4, 2]] * 3, batch_size=4)
    np.testing.assert_allclose(together[2].token_logprobs, alone.token_logprobs, rtol=1e-5, atol=1e-5)
    assert together[2].is_greedy == alone.is_greedy


def test_few_shapes_are_compiled():
    lm = zoo.build("gpt-nano", "causal_lm", vocabulary_size=20, max_sequence_length=WINDOW)  # nothing compiled yet
    zoo.score(lm, [[1]], [[2]], batch_size=4)  # the (1, 16) shape
    before = generation.trace_count()
    pairs = [([1 + i % 5] * (1 + i), [2, 3]) for i in range(12)]  # 3 to 14 tokens
    zoo.score(lm, [p[0] for p in pairs], [p[1] for p in pairs], batch_size=4)
    # Three batches of 4 rows, all padded to 16 positions: one new shape, (4, 16).
    assert generation.trace_count() - before == 1
    zoo.score(lm, [[5] * 9], [[1, 2, 3]], batch_size=4)  # one row: the (1, 16) shape of the first call
    assert generation.trace_count() - before == 1


def test_text_and_token_ids_agree(lm):
    tokenizer = lm.tokenizer
    contexts, continuations = ["ROMEO: But ", "JULIET:"], ["soft", " Ay me!"]
    by_text = zoo.score(lm, contexts, continuations)
    # The harness's split: the context's trailing space belongs to the continuation.
    ids = [(token_id_lists(tokenizer, ["ROMEO: But"])[0], token_id_lists(tokenizer, [" soft"])[0]),
           (token_id_lists(tokenizer, ["JULIET:"])[0], token_id_lists(tokenizer, [" Ay me!"])[0])]
    by_ids = zoo.score(lm, [c for c, _ in ids], [c for _, c in ids])
    for text_score, id_score in zip(by_text, by_ids):
        np.testing.assert_array_equal(text_score.token_ids, id_score.token_ids)
        np.testing.assert_allclose(text_score.token_logprobs, id_score.token_logprobs, atol=1e-6)
    assert by_text[0].tokens == (" ", "s", "o", "f", "t")


def test_long_pairs_keep_their_last_tokens(lm):
    context = [(3 * i) % lm.vocabulary_size for i in range(40)]
    continuation = [4, 5, 6]
    score = zoo.score(lm, [context], [continuation])[0]
    expected, _, _ = _reference(lm, context, continuation)  # the last W + 1 tokens
    np.testing.assert_allclose(score.token_logprobs, expected, rtol=1e-5, atol=1e-5)
    assert score.context_length == WINDOW + 1 - len(continuation)
    # The same as scoring the kept tokens alone.
    kept = zoo.score(lm, [context[-(WINDOW + 1 - 3):]], [continuation])[0]
    np.testing.assert_allclose(score.token_logprobs, kept.token_logprobs, atol=1e-6)


def test_empty_context_uses_the_start_token():
    words = WordTokenizer.from_texts(SENTENCES)
    keras.utils.set_random_seed(0)
    lm = zoo.build("gpt-nano", "causal_lm", vocabulary_size=words.vocabulary_size(), max_sequence_length=WINDOW,
                   initializer_range=1.0, tokenizer=words)
    by_text = zoo.score(lm, [""], ["the dog runs"])[0]
    by_ids = zoo.score(lm, [[words.start_token_id]], [token_id_lists(words, ["the dog runs"])[0]])[0]
    np.testing.assert_allclose(by_text.token_logprobs, by_ids.token_logprobs, atol=1e-6)
    assert len(by_text.token_ids) == 3


def test_encoder_decoder_scores_the_target_with_teacher_forcing(translator):
    sources = [[4, 5, 6, 7, 8], [9, 4]]
    targets = [[5, 6, 7], [4, 8, 9, 10, 2]]
    scores = zoo.score(translator, sources, targets, top_logprobs=2)
    start = translator.tokenizer.start_token_id
    for source, target, score in zip(sources, targets, scores):
        logits = translator({
            "encoder_token_ids": np.array([source]), "encoder_padding_mask": np.ones((1, len(source)), "int32"),
            "decoder_token_ids": np.array([[start] + target[:-1]]), "decoder_padding_mask": np.ones((1, len(target)), "int32"),
        }, training=False)
        logprobs = _log_softmax(keras.ops.convert_to_numpy(logits)[0])
        np.testing.assert_allclose(score.token_logprobs, logprobs[np.arange(len(target)), target], rtol=1e-5, atol=1e-5)
        assert score.is_greedy == bool((logprobs.argmax(-1) == target).all())
        assert score.context_length == len(source)
    by_text = zoo.score(translator, ["a dog runs"], ["ein hund läuft"])[0]
    by_ids = zoo.score(translator, token_id_lists(translator.source_tokenizer, ["a dog runs"]),
                       token_id_lists(translator.tokenizer, ["ein hund läuft"]))[0]
    np.testing.assert_allclose(by_text.token_logprobs, by_ids.token_logprobs, atol=1e-6)


def _token_logprob(lm, tokens, j, begin):
    """log p(tokens[j] | tokens[begin:j]), from one forward pass in float64."""
    logits = keras.ops.convert_to_numpy(lm({"token_ids": np.array([tokens[begin:j]], "int32")}, training=False))[0, -1]
    return _log_softmax(logits)[tokens[j]]


TOKENS = [(5 * i + i // 3) % 20 for i in range(45)]


def test_rolling_with_disjoint_windows_sums_them(lm):
    result = zoo.score_rolling(lm, [TOKENS], prefix_token_id=0)[0]
    sequence = [0] + TOKENS
    # Windows of W inputs, W + 1 tokens apart by one: tokens 1-16 from 0-15, 17-32 from 16-31, 33-45 from 32-44.
    expected = 0.0
    for begin in range(0, len(TOKENS), WINDOW):
        expected += zoo.score(lm, [sequence[begin:begin + 1]], [sequence[begin + 1:begin + WINDOW + 1]])[0].logprob
    np.testing.assert_allclose(result.logprob, expected, rtol=1e-5, atol=1e-4)
    assert (result.token_count, result.window_count) == (len(TOKENS), 3)
    np.testing.assert_allclose(result.perplexity, np.exp(-expected / len(TOKENS)), rtol=1e-6)


@pytest.mark.parametrize("stride", [5, 11])
def test_rolling_with_a_stride_scores_each_token_once(lm, stride):
    result = zoo.score_rolling(lm, [TOKENS, TOKENS[:7]], stride=stride, prefix_token_id=0, batch_size=3)
    for tokens, rolling in zip([TOKENS, TOKENS[:7]], result):
        sequence = [0] + tokens
        expected = 0.0
        for j in range(1, len(sequence)):
            # The first window whose W inputs reach position j - 1 scores token j.
            begin = next(k * stride for k in range(len(sequence)) if k * stride + WINDOW >= j)
            expected += _token_logprob(lm, sequence, j, begin)
        assert rolling.token_count == len(tokens)
        np.testing.assert_allclose(rolling.logprob, expected, rtol=1e-5, atol=1e-4)


def test_rolling_on_text_without_a_prefix_scores_all_but_the_first_token(lm):
    text = TEXT[:30]
    result = zoo.score_rolling(lm, [text], prefix_token_id="auto")[0]  # a CharTokenizer has no start or end token
    ids = token_id_lists(lm.tokenizer, [text])[0]
    assert result.token_count == len(ids) - 1
    same = zoo.score_rolling(lm, [ids], prefix_token_id=None)[0]
    np.testing.assert_allclose(result.logprob, same.logprob, atol=1e-6)


def test_misuse_gets_one_clear_line(lm, translator):
    encoder = zoo.build("bert-tiny", "classifier", vocabulary_size=30)
    with pytest.raises(ValueError, match="needs a language model.*got a BertClassifier"):
        zoo.score(encoder, [[1]], [[2]])
    with pytest.raises(ValueError, match="2 contexts and 1 continuations"):
        zoo.score(lm, [[1], [2]], [[3]])
    with pytest.raises(ValueError, match="one kind"):
        zoo.score(lm, ["a"], [[3]])
    with pytest.raises(ValueError, match="continuation 0 has 17 tokens, more than the model's context of 16"):
        zoo.score(lm, [[1]], [[2] * 17])
    with pytest.raises(ValueError, match="context 0 is empty and the tokenizer .CharTokenizer. has no start"):
        zoo.score(lm, [""], ["Ay"])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        zoo.score(lm, [[1]], [[lm.vocabulary_size]])
    with pytest.raises(ValueError, match=r"`stride` must be an integer in \[1, 16\]"):
        zoo.score_rolling(lm, [[1, 2]], stride=17)
    with pytest.raises(ValueError, match="needs a causal LM.*got a EncoderDecoder"):
        zoo.score_rolling(translator, [[1, 2]])


@pytest.mark.parametrize("function", [zoo.score, zoo.score_rolling])
def test_docstring_examples_run_and_hold(function):
    example = re.search(r"Example:\s*\n\s*```python\n(.*?)\n\s*```", inspect.getdoc(function), re.S).group(1)
    scope = {}
    exec(inspect.cleandoc("\n" + example), scope)
    if function is zoo.score:
        assert scope["scores"][0].token_logprobs.shape == (7,)
    else:
        assert scope["result"].token_count == 220
        assert 5 < scope["result"].perplexity < 25
