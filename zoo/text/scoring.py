"""Scoring: the log-probability a model gives a text, what EleutherAI's
lm-evaluation-harness asks of a model (`loglikelihood`,
`loglikelihood_rolling`).

    lm = zoo.load("runs/gpt_char/model.keras")
    [s.logprob for s in zoo.score(lm, ["ROMEO: ", "ROMEO: "], ["Hello", "Farewell"])]  # two floats
    zoo.score_rolling(lm, [long_text])[0].perplexity  # exp(-logprob / token_count)

Every pair becomes one row of token ids: a causal LM reads context and
continuation as one sequence and each continuation token is scored from
the logits of the position before it; an encoder-decoder reads the
context as its source and scores the continuation behind its start token
(teacher forcing). The rows are sorted by length and padded on the right
to a few bucket lengths (powers of two) and batch sizes, so that XLA
compiles a few shapes; a causal model's position sees only the positions
before it, and the padding comes after every scored position, so it
changes nothing. The log-softmax is taken in float32 whatever the model's
compute dtype, inside the compiled function, so only the scored tokens'
log-probabilities (not the (B, L, V) logits) come back to the host.

Shape letters: N pairs (or texts), n a continuation's tokens, k the top
alternatives asked for, B batch, L a bucket's length, V vocabulary, W the
model's window (its `max_sequence_length`).
"""

import dataclasses
import math
import weakref

import keras
import numpy as np
from keras import ops

from zoo.tokenizers import token_id_lists
from zoo.generation import compiled, prompts
from zoo.models import CausalLM, EncoderDecoder
from zoo.text.tokens import decode, special_id, tokenizer_of

_SMALLEST_BUCKET = 16


@dataclasses.dataclass(frozen=True)
class Score:
    """One continuation's log-likelihood given its context (natural logs).

    Attributes:
        logprob: float, the sum of `token_logprobs`: log p(continuation |
            context).
        is_greedy: bool, whether every continuation token is the argmax of
            the model's logits at its position (greedy decoding would have
            written the continuation).
        token_ids: (n,) int32, the continuation's tokens as scored.
        tokens: n str, each token's text alone (the tokenizer's
            `detokenize` of that one id); empty when the model carries no
            tokenizer.
        token_logprobs: (n,) float32, log p(token_i | context, tokens before i).
        top_ids: (n, k) int32, the k most likely tokens at each position,
            most likely first (k is `score`'s `top_logprobs`; 0 by default).
        top_logprobs: (n, k) float32, their log-probabilities.
        context_length: int, the context tokens the model read (after
            left-truncation to its window).
    """

    logprob: float
    is_greedy: bool
    token_ids: np.ndarray
    tokens: tuple
    token_logprobs: np.ndarray
    top_ids: np.ndarray
    top_logprobs: np.ndarray
    context_length: int


@dataclasses.dataclass(frozen=True)
class RollingScore:
    """One text's rolling log-likelihood (natural logs).

    Attributes:
        logprob: float, the sum of every scored token's log-probability.
        token_count: int, how many tokens were scored (each once).
        window_count: int, how many windows of the model's context were run.
    """

    logprob: float
    token_count: int
    window_count: int

    @property
    def perplexity(self):
        """exp(-logprob / token_count): the token-level perplexity."""
        return math.exp(-self.logprob / self.token_count)


def score(model, contexts, continuations, batch_size=8, top_logprobs=0):
    """The log-probability of each continuation given its context.

    What lm-evaluation-harness's `loglikelihood` asks for, computed as its
    `hf` model computes it:

    - On text, a causal LM's pair is tokenized as the harness's `hf` model
      does: trailing whitespace of the context moves to the front of the
      continuation, `context + continuation` is encoded whole (with the
      tokenizer's own special tokens, e.g. Llama's BOS) and split where the
      encoded context alone ends, so the tokens are those the model sees
      in running text. An empty context is the tokenizer's start token
      (else its end token: the harness's `prefix_token_id`).
    - On token ids, the pairs are used as given.
    - A context plus continuation longer than the model's window W keeps
      its last W + 1 tokens (the model reads W of them): left-truncation,
      as the harness does.
    - An encoder-decoder reads the context as its source (cut to W, as
      `zoo.translate` cuts it) and scores the continuation (the target)
      with teacher forcing behind its `[START]` token. On text the source
      and the target are encoded separately, as the harness's seq2seq
      models do; the target's `[END]` is scored only if it is given (as an
      id).

    Args:
        model: a causal LM (`zoo.models.CausalLM`: GPT, Llama, Gemma 3, ...)
            or an `EncoderDecoder`; on text it must carry its tokenizer.
        contexts: N str, or N lists of token ids (may be empty for a causal
            LM only on text).
        continuations: N str (non-empty), or N non-empty lists of token ids,
            of the same kind as `contexts`.
        batch_size: rows per forward pass.
        top_logprobs: k, the most likely alternatives to keep at each
            scored position (OpenAI's `logprobs`); 0 keeps none.

    Returns:
        N `Score`s, in the order of the pairs.

    Example:

    ```python
    import zoo
    from zoo.tokenizers import CharTokenizer

    tokenizer = CharTokenizer.from_text("the cat sat on a mat.")
    lm = zoo.build("gpt-nano", "causal_lm", vocabulary_size=tokenizer.vocabulary_size(), tokenizer=tokenizer)
    scores = zoo.score(lm, ["the cat sat on ", "the cat sat on "], ["a mat.", "the cat."])
    best = max(range(2), key=lambda i: scores[i].logprob)  # the likelier ending
    scores[0].token_logprobs.shape  # (7,): one per character of " a mat." (the context's space moves)
    ```
    """
    _check_model(model, "zoo.score")
    _check_positive("batch_size", batch_size)
    if not isinstance(top_logprobs, int) or isinstance(top_logprobs, bool) or not 0 <= top_logprobs <= model.vocabulary_size:
        raise ValueError(f"`top_logprobs` must be an integer in [0, {model.vocabulary_size}]; got {top_logprobs!r}.")
    contexts, continuations = _pairs(model, contexts, continuations)
    if isinstance(model, EncoderDecoder):
        rows = _encoder_decoder_rows(model, contexts, continuations)
    else:
        rows = [_causal_row(model, context, continuation, i)
                for i, (context, continuation) in enumerate(zip(contexts, continuations))]
    results = _score_rows(model, rows, batch_size, top_logprobs)
    tokenizer = getattr(model, "tokenizer", None)
    scores = []
    for row, (logprobs, greedy, top_ids, top_values) in zip(rows, results):
        ids = np.asarray(row.targets[-row.scored:], "int32")
        tokens = tuple(decode(tokenizer, [int(t)]) for t in ids) if tokenizer is not None else ()
        scores.append(Score(float(np.sum(logprobs, dtype="float64")), bool(np.all(greedy)), ids, tokens, logprobs,
                            top_ids, top_values, row.context_length))
    return scores


def score_rolling(model, texts, stride=None, prefix_token_id="auto", batch_size=8):
    """The log-likelihood of whole texts, in windows of the model's context.

    What lm-evaluation-harness's `loglikelihood_rolling` asks for
    (perplexity tasks such as wikitext), and what transformers' perplexity
    guide computes: a text's tokens are scored in windows of W positions,
    the window moving `stride` positions at a time; each window scores
    the tokens the windows before it did not, so every token is scored
    once, from at least W - stride + 1 tokens of left context (all of the
    text before it in the first window). With `stride` W (the default) the
    windows are disjoint and the numbers are the harness's `hf` model's.

    The first token is predicted from `prefix_token_id`, as the harness
    does; on text the tokens are the tokenizer's own (with its special
    tokens, as the harness encodes).

    Args:
        model: a causal LM (`zoo.models.CausalLM`); on text it must carry
            its tokenizer.
        texts: N str, or N non-empty lists of token ids.
        stride: positions between window starts, in [1, W]; None is W.
        prefix_token_id: the id the first token is predicted from. "auto":
            the tokenizer's start token, else its end token, else none;
            None: the first token is context only, not scored (so
            `token_count` is one less than the text's tokens).
        batch_size: windows per forward pass.

    Returns:
        N `RollingScore`s: `logprob`, `token_count`, `window_count`, and
        `perplexity` = exp(-logprob / token_count).

    Example:

    ```python
    import zoo
    from zoo.tokenizers import CharTokenizer

    text = "the cat sat on a mat. " * 10
    tokenizer = CharTokenizer.from_text(text)
    lm = zoo.build("gpt-nano", "causal_lm", vocabulary_size=tokenizer.vocabulary_size(), tokenizer=tokenizer)
    result = zoo.score_rolling(lm, [text], stride=32, prefix_token_id=0)[0]
    result.token_count  # 220: every character, each scored once
    result.perplexity  # near the vocabulary size (11) for an untrained model
    ```
    """
    if isinstance(model, EncoderDecoder) or not isinstance(model, CausalLM):
        raise ValueError(
            f"zoo.score_rolling needs a causal LM (a GPTCausalLM, LlamaCausalLM or Gemma3CausalLM); "
            f"got a {type(model).__name__}."
        )
    _check_positive("batch_size", batch_size)
    window = model.max_sequence_length
    stride = window if stride is None else stride
    if not isinstance(stride, int) or isinstance(stride, bool) or not 1 <= stride <= window:
        raise ValueError(f"`stride` must be an integer in [1, {window}] (the model's context); got {stride!r}.")
    if isinstance(texts, str):
        raise ValueError("zoo.score_rolling takes a list of texts; got one str (wrap it: [text]).")
    if not isinstance(texts, (list, tuple)) or not texts:
        raise ValueError(f"zoo.score_rolling takes a non-empty list of str or of token-id lists; got {texts!r}.")
    if all(isinstance(t, str) for t in texts):
        token_lists = token_id_lists(tokenizer_of(model, "zoo.score_rolling on text"), list(texts))
    else:
        token_lists = [row.tolist() for row in prompts.as_batch(list(texts), name="texts")]
    if prefix_token_id == "auto":
        prefix_token_id = _prefix_token(getattr(model, "tokenizer", None))
    elif prefix_token_id is not None:
        prompts.check_token_range([np.array([prefix_token_id])], model.vocabulary_size, "prefix_token_id")
    rows, owners = [], []
    for i, tokens in enumerate(token_lists):
        if not tokens:
            raise ValueError(f"text {i} has no tokens; expected at least one.")
        prompts.check_token_range([np.asarray(tokens)], model.vocabulary_size, "texts")
        sequence = ([prefix_token_id] if prefix_token_id is not None else []) + list(tokens)
        for inputs, scored in _windows(len(sequence), window, stride):
            rows.append(_Row(sequence[inputs.start:inputs.stop], sequence[inputs.start + 1:inputs.stop + 1], scored,
                             len(inputs) - scored + 1))
            owners.append(i)
    results = _score_rows(model, rows, batch_size, 0)
    logprob, count, windows = [0.0] * len(token_lists), [0] * len(token_lists), [0] * len(token_lists)
    for owner, row, (logprobs, *_) in zip(owners, rows, results):
        logprob[owner] += float(np.sum(logprobs, dtype="float64"))
        count[owner] += row.scored
        windows[owner] += 1
    return [RollingScore(*values) for values in zip(logprob, count, windows)]


def _windows(length, window, stride):
    """The windows of a sequence of `length` tokens (the prefix included):
    (the input positions, a `range`, and how many of its last positions
    are scored). Position t predicts token t + 1."""
    targets = length - 1
    begin, done = 0, 0
    while done < targets:
        end = min(begin + window, targets)  # inputs [begin, end) predict tokens [begin + 1, end + 1)
        yield range(begin, end), end - done
        done, begin = end, begin + stride


@dataclasses.dataclass
class _Row:
    """One row of a forward pass: `inputs` (the model's tokens), `targets`
    (the token each input position predicts), the last `scored` positions
    scored; `source` the encoder's input (encoder-decoder only)."""

    inputs: list
    targets: list
    scored: int
    context_length: int
    source: list = None


def _check_model(model, what):
    if not isinstance(model, (CausalLM, EncoderDecoder)):
        raise ValueError(
            f"{what} needs a language model: a causal LM (a GPTCausalLM, LlamaCausalLM or Gemma3CausalLM) or an "
            f"EncoderDecoder; got a {type(model).__name__}."
        )


def _check_positive(name, value):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"`{name}` must be a positive integer; got {value!r}.")


def _pairs(model, contexts, continuations):
    """The pairs as two lists of token-id lists (causal LM, text: still str,
    tokenized per pair by `_causal_row`)."""
    for name, value in (("contexts", contexts), ("continuations", continuations)):
        if isinstance(value, str):
            raise ValueError(f"zoo.score takes a list of {name}; got one str (wrap it: [{name[:-1]}]).")
        if not isinstance(value, (list, tuple)) or not value:
            raise ValueError(f"zoo.score takes a non-empty list of {name}; got {value!r}.")
    if len(contexts) != len(continuations):
        raise ValueError(
            f"zoo.score got {len(contexts)} contexts and {len(continuations)} continuations; expected one of each per pair."
        )
    text = [all(isinstance(x, str) for x in value) for value in (contexts, continuations)]
    if text[0] != text[1]:
        raise ValueError("zoo.score takes contexts and continuations of one kind: both str, or both token-id lists.")
    if text[0]:
        return list(contexts), list(continuations)
    checked = []
    for name, value, vocabulary_size in (
        ("contexts", contexts, getattr(model, "source_vocabulary_size", model.vocabulary_size)),
        ("continuations", continuations, model.vocabulary_size),
    ):
        rows = []
        for i, row in enumerate(value):
            row = np.asarray(row)
            if row.ndim != 1 or (row.size and not np.issubdtype(row.dtype, np.integer)):
                raise ValueError(f"`{name}` sequence {i} must be a 1-D list of token ids; got {value[i]!r}.")
            rows.append(row.astype("int32"))
        prompts.check_token_range(rows, vocabulary_size, name)
        checked.append([row.tolist() for row in rows])
    return checked


def _prefix_token(tokenizer):
    """The harness's `prefix_token_id`: the start token, else the end token, else None."""
    if tokenizer is None:
        return None
    for kind in ("start", "end"):
        try:
            return special_id(tokenizer, kind)
        except ValueError:
            continue
    return None


def _causal_row(model, context, continuation, i):
    if isinstance(context, str):
        context, continuation = _encode_pair(tokenizer_of(model, "zoo.score on text"), context, continuation, i)
    if not continuation:
        raise ValueError(f"continuation {i} has no tokens; expected at least one to score.")
    window = model.max_sequence_length
    if len(continuation) > window:
        raise ValueError(
            f"continuation {i} has {len(continuation)} tokens, more than the model's context of {window}; "
            f"expected at most {window}."
        )
    if not context:
        raise ValueError(f"context {i} has no tokens; expected at least one (the first token is predicted from it).")
    tokens = (list(context) + list(continuation))[-(window + 1):]  # left-truncation: the model reads W of them
    return _Row(tokens[:-1], tokens[1:], len(continuation), len(tokens) - len(continuation))


def _encode_pair(tokenizer, context, continuation, i):
    """A text pair's token ids as the harness's `hf` model encodes it."""
    if context == "":
        special = token_id_lists(tokenizer, [""])[0]  # what the tokenizer adds to every text (e.g. BOS)
        ids = token_id_lists(tokenizer, [continuation])[0]
        if special and ids[: len(special)] == special:
            ids = ids[len(special):]
        prefix = _prefix_token(tokenizer)
        if prefix is None:
            raise ValueError(
                f"context {i} is empty and the tokenizer ({type(tokenizer).__name__}) has no start or end token to "
                "predict the first token from; expected a non-empty context."
            )
        if ids and ids[0] == prefix:
            return ids[:1], ids[1:]
        return [prefix], ids
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    whole, context_ids = token_id_lists(tokenizer, [context + continuation, context])
    return context_ids, whole[len(context_ids):]


def _encoder_decoder_rows(model, contexts, continuations):
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is None:
        raise ValueError(
            "zoo.score on an EncoderDecoder needs the tokenizer it carries (for its [START] token); attach one with "
            "model.tokenizer = ..."
        )
    start = special_id(tokenizer, "start")
    if isinstance(contexts[0], str):
        contexts = token_id_lists(model.source_tokenizer or tokenizer, contexts)
        continuations = token_id_lists(tokenizer, continuations)
    window = model.max_sequence_length
    rows = []
    for i, (source, target) in enumerate(zip(contexts, continuations)):
        if not source:
            raise ValueError(f"context {i} (the source) has no tokens; expected at least one.")
        if not target:
            raise ValueError(f"continuation {i} (the target) has no tokens; expected at least one to score.")
        if len(target) > window:
            raise ValueError(
                f"continuation {i} has {len(target)} tokens, more than the model's context of {window}; "
                f"expected at most {window}."
            )
        source = list(source)[:window]
        rows.append(_Row([start] + list(target[:-1]), list(target), len(target), len(source), source))
    return rows


def _bucket(length, window):
    return min(max(_SMALLEST_BUCKET, 1 << (length - 1).bit_length()), max(window, length))


def _score_rows(model, rows, batch_size, top_logprobs):
    """Each row's scored positions: (n,) log-probabilities, (n,) greedy
    flags, (n, k) top ids and (n, k) top log-probabilities, in row order."""
    encoder_decoder = isinstance(model, EncoderDecoder)
    key = ("score", encoder_decoder, top_logprobs)
    function = compiled.lookup(model, key) or compiled.compile(model, key, _ScoringFunction(model, top_logprobs))
    window = model.max_sequence_length
    order = sorted(range(len(rows)), key=lambda i: -len(rows[i].inputs))  # longest first, as the harness
    results = [None] * len(rows)
    for first in range(0, len(order), batch_size):
        chunk = order[first: first + batch_size]
        batch = min(batch_size, 1 << (len(chunk) - 1).bit_length())  # a few batch shapes
        members = [rows[i] for i in chunk] + [rows[chunk[-1]]] * (batch - len(chunk))
        length = _bucket(max(len(row.inputs) for row in members), window)
        ids, mask = prompts.right_pad([np.asarray(row.inputs) for row in members], length, 0)
        targets, _ = prompts.right_pad([np.asarray(row.targets) for row in members], length, 0)
        arrays = (ids, mask.astype("int32"), targets)
        if encoder_decoder:
            source_length = _bucket(max(len(row.source) for row in members), window)
            source, source_mask = prompts.right_pad([np.asarray(row.source) for row in members], source_length, 0)
            arrays += (source, source_mask.astype("int32"))
        logprobs, greedy, top_ids, top_values = function(*arrays)
        for b, i in enumerate(chunk):
            end = len(rows[i].inputs)
            positions = slice(end - rows[i].scored, end)
            results[i] = (logprobs[b, positions], greedy[b, positions], top_ids[b, positions],
                          top_values[b, positions])
    return results


class _ScoringFunction:
    """The traced function of one model (held weakly: the compiled
    functions are cached per model and must not keep it alive): the
    model's forward pass, then each position's log-probability of its
    target, whether the target is the argmax, and the top k.

    Call arguments: `ids` (B, L) int32, `mask` (B, L) int32, `targets`
    (B, L) int32, and an encoder-decoder's `source` (B, S) and
    `source_mask` (B, S). Returns (B, L) float32, (B, L) bool, (B, L, k)
    int32, (B, L, k) float32.
    """

    sampler = None  # no random state

    def __init__(self, model, top_logprobs):
        self._model = weakref.ref(model)
        self.top_logprobs = top_logprobs

    @property
    def model(self):
        return self._model()

    def what(self, ids, mask, targets, *source):
        shapes = f"batch {ids.shape[0]}, length {ids.shape[1]}" + (f", source {source[0].shape[1]}" if source else "")
        return f"scoring for {shapes}"

    def __call__(self, ids, mask, targets, *source):
        compiled.count_trace()
        if source:
            inputs = {"encoder_token_ids": source[0], "encoder_padding_mask": source[1],
                      "decoder_token_ids": ids, "decoder_padding_mask": mask}
        else:
            inputs = {"token_ids": ids, "padding_mask": mask}
        logits = ops.cast(self.model(inputs, training=False), "float32")  # (B, L, V)
        logprobs = ops.log_softmax(logits, axis=-1)
        target_logprobs = ops.take_along_axis(logprobs, ops.expand_dims(targets, -1), axis=-1)[..., 0]  # (B, L)
        greedy = ops.equal(ops.cast(ops.argmax(logits, axis=-1), "int32"), targets)
        if self.top_logprobs:
            top_values, top_ids = ops.top_k(logprobs, self.top_logprobs)  # (B, L, k)
        else:
            top_values = top_ids = logprobs[..., :0]  # (B, L, 0)
        return target_logprobs, greedy, ops.cast(top_ids, "int32"), top_values
