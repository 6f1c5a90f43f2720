"""The decoding controls that reshape a step's logits before a sampler
draws: `logit_bias`, the repetition penalty, the presence and frequency
penalties, and `min_p`. Each is a row's own setting (arrays of B rows, so
that rows with different controls can share one step), and `apply`
computes them from the decoding's token buffer in `keras.ops` alone, so
that they trace into a compiled step (no host round-trip per token).

- `logit_bias` (OpenAI): a bias added to chosen tokens' logits.
- `repetition_penalty` (Keskar et al. 2019, CTRL; as transformers'
  `RepetitionPenaltyLogitsProcessor`): over every token already in the
  prompt or the output, a positive logit is divided by the penalty and a
  negative one multiplied by it.
- `presence_penalty` and `frequency_penalty` (OpenAI): over the generated
  tokens, `logit - frequency_penalty * count - presence_penalty * (count > 0)`.
- `no_repeat_ngram_size` (as transformers' `NoRepeatNGramLogitsProcessor`,
  after Paulus et al. 2017): a token that would complete an n-gram already
  in the row's tokens (prompt and output) is removed; n is at most
  `NGRAM_MOST`, 0 is off.
- `min_p` (Nguyen et al. 2024): only tokens whose probability at the
  sampler's temperature is at least `min_p` times the likeliest token's are
  kept; as a logit, `logit >= max_logit + temperature * log(min_p)`.

Shape letters: B rows, L the token buffer's length, V vocabulary.
"""

import math

import numpy as np
from keras import ops

# A removed token's logit: finite, as `samplers.suppress` uses, so that a
# row whose every token is removed still has a distribution.
REMOVED = -1e9

NAMES = ("logit_bias", "repetition_penalty", "presence_penalty", "frequency_penalty", "no_repeat_ngram_size", "min_p")
NGRAM_MOST = 10  # the longest n-gram `no_repeat_ngram_size` takes (the compiled step compares this many positions)


def apply(logits, token_ids, index, prompt_lengths, controls, temperature=1.0):
    """(B, V) float32 logits after the controls.

    Args:
        logits: (B, V) float32, the logits of position `index`.
        token_ids: (B, L) int32, the buffer: a row's prompt, then its new
            tokens, up to position `index` (excluded).
        index: the position being chosen: a scalar (possibly traced), or
            (B,) one a row.
        prompt_lengths: (B,) int32; the new tokens are at positions
            [prompt_length, index).
        controls: a dict of `Controls.arrays()`: `logit_bias` (B, V),
            `repetition_penalty`, `presence_penalty`, `frequency_penalty`,
            `min_p` (B,) float32, `no_repeat_ngram_size` (B,) int32.
        temperature: the sampler's temperature (for `min_p`).
    """
    batch, length = token_ids.shape[0], token_ids.shape[1]
    vocabulary = logits.shape[-1]
    logits = logits + controls["logit_bias"]
    positions = ops.expand_dims(ops.arange(length, dtype="int32"), 0)  # (1, L)
    index = ops.reshape(ops.cast(index, "int32"), (-1, 1))  # (1, 1) or (B, 1)
    before = ops.cast(ops.less(positions, index), "float32")  # (1, L) or (B, L): written already
    new = before * ops.cast(ops.greater_equal(positions, ops.expand_dims(prompt_lengths, 1)), "float32")  # (B, L)
    rows = ops.repeat(ops.expand_dims(ops.arange(batch, dtype="int32"), 1), length, axis=1)  # (B, L)
    indices = ops.reshape(ops.stack([rows, ops.cast(token_ids, "int32")], axis=-1), (-1, 2))  # (B*L, 2)
    seen = ops.scatter(indices, ops.reshape(ops.broadcast_to(before, (batch, length)), (-1,)), (batch, vocabulary))
    counts = ops.scatter(indices, ops.reshape(new, (-1,)), (batch, vocabulary))  # (B, V)
    penalty = ops.expand_dims(controls["repetition_penalty"], 1)  # (B, 1)
    penalized = ops.where(ops.greater(logits, 0), logits / penalty, logits * penalty)
    logits = ops.where(ops.greater(seen, 0), penalized, logits)
    logits = (logits - ops.expand_dims(controls["frequency_penalty"], 1) * counts
              - ops.expand_dims(controls["presence_penalty"], 1) * ops.cast(ops.greater(counts, 0), "float32"))
    repeated = repeated_ngram_ends(token_ids, index, controls["no_repeat_ngram_size"], vocabulary)
    logits = ops.where(repeated, REMOVED, logits)
    min_p = ops.expand_dims(controls["min_p"], 1)
    floor = ops.max(logits, axis=-1, keepdims=True) + temperature * ops.log(ops.maximum(min_p, 1e-30))
    keep = ops.logical_or(ops.less_equal(min_p, 0.0), ops.greater_equal(logits, floor))
    return ops.where(keep, logits, REMOVED)


def repeated_ngram_ends(token_ids, index, size, vocabulary):
    """(B, V) bool: the tokens that would complete an n-gram (n = `size`, one
    a row; 0 off) already among the row's tokens before `index` (index (1,
    1) or (B, 1)), its first n - 1 tokens those that end the buffer there."""
    batch, length = token_ids.shape[0], token_ids.shape[1]
    index = ops.broadcast_to(ops.reshape(index, (-1,)), (batch,))  # (B,)
    size = ops.cast(size, "int32")  # (B,)
    starts = ops.expand_dims(ops.arange(length, dtype="int32"), 0)  # (1, L): where each n-gram begins
    # An n-gram whose last token is written, and a prefix of n - 1 tokens to match (none before n - 1 are).
    written = ops.less(starts + ops.expand_dims(size, 1) - 1, ops.expand_dims(index, 1))  # (B, L)
    has_prefix = ops.logical_and(ops.greater(size, 0), ops.greater_equal(index - size + 1, 0))  # (B,)
    match = ops.logical_and(written, ops.expand_dims(has_prefix, 1))
    padded = ops.pad(token_ids, [[0, 0], [0, NGRAM_MOST]], constant_values=-1)
    for k in range(NGRAM_MOST - 1):  # the n-gram's k-th token against the prefix's
        prefix = ops.take_along_axis(token_ids, ops.expand_dims(ops.clip(index - size + 1 + k, 0, length - 1), 1),
                                     axis=1)  # (B, 1)
        same = ops.equal(ops.slice(padded, [0, k], [batch, length]), prefix)  # (B, L)
        match = ops.logical_and(match, ops.logical_or(ops.expand_dims(ops.greater_equal(k, size - 1), 1), same))
    ends = ops.take_along_axis(token_ids, ops.clip(starts + ops.expand_dims(size, 1) - 1, 0, length - 1), axis=1)
    rows = ops.repeat(ops.expand_dims(ops.arange(batch, dtype="int32"), 1), length, axis=1)  # (B, L)
    indices = ops.reshape(ops.stack([rows, ops.cast(ends, "int32")], axis=-1), (-1, 2))
    hits = ops.scatter(indices, ops.reshape(ops.cast(match, "float32"), (-1,)), (batch, vocabulary))
    return ops.greater(hits, 0)


class Controls:
    """Each row's controls, checked; `None` for a setting means off.

    Args:
        batch: B, the rows.
        vocabulary_size: V.
        logit_bias: a `{token id: bias}` dict (every row), or B of them
            (None for none); biases in [-100, 100] (OpenAI's range).
        repetition_penalty: a number > 0 (1 is off), or B of them.
        presence_penalty, frequency_penalty: numbers in [-2, 2] (OpenAI's
            range; 0 is off), or B of them.
        no_repeat_ngram_size: an int in [0, NGRAM_MOST] (0 is off), or B
            of them.
        min_p: a number in [0, 1] (0 is off), or B of them.
    """

    def __init__(self, batch, vocabulary_size, logit_bias=None, repetition_penalty=None, presence_penalty=None,
                 frequency_penalty=None, min_p=None, no_repeat_ngram_size=None):
        self.batch, self.vocabulary_size = batch, vocabulary_size
        self.repetition_penalty = _per_row("repetition_penalty", repetition_penalty, batch, 1.0,
                                           lambda v: v > 0, "a number > 0")
        self.presence_penalty = _per_row("presence_penalty", presence_penalty, batch, 0.0,
                                         lambda v: -2 <= v <= 2, "a number in [-2, 2]")
        self.frequency_penalty = _per_row("frequency_penalty", frequency_penalty, batch, 0.0,
                                          lambda v: -2 <= v <= 2, "a number in [-2, 2]")
        self.min_p = _per_row("min_p", min_p, batch, 0.0, lambda v: 0 <= v <= 1, "a number in [0, 1]")
        sizes = _per_row("no_repeat_ngram_size", no_repeat_ngram_size, batch, 0,
                         lambda v: float(v).is_integer() and 0 <= v <= NGRAM_MOST and not isinstance(v, float),
                         f"an integer in [0, {NGRAM_MOST}]")
        self.no_repeat_ngram_size = sizes.astype("int32")
        biases = logit_bias if isinstance(logit_bias, (list, tuple)) else [logit_bias] * batch
        if len(biases) != batch:
            raise ValueError(f"`logit_bias`: expected one dict or {batch} (one a row); got {len(biases)}.")
        self.logit_bias = np.zeros((batch, vocabulary_size), "float32")
        for row, bias in enumerate(biases):
            for token, value in (bias or {}).items():
                token = int(token)
                if not 0 <= token < vocabulary_size:
                    raise ValueError(
                        f"`logit_bias`: token id {token} is outside the vocabulary [0, {vocabulary_size}).")
                if not isinstance(value, (int, float)) or isinstance(value, bool) or not -100 <= value <= 100:
                    raise ValueError(f"`logit_bias`: the bias of token {token} must be a number in [-100, 100]; "
                                     f"got {value!r}.")
                self.logit_bias[row, token] = value

    @property
    def active(self):
        """Whether any control is on (off: the decoding is as without them)."""
        return bool(self.logit_bias.any() or (self.repetition_penalty != 1).any() or self.presence_penalty.any()
                    or self.frequency_penalty.any() or self.min_p.any() or self.no_repeat_ngram_size.any())

    def arrays(self):
        """The dict that `apply` takes (NumPy arrays, B rows)."""
        return {"logit_bias": self.logit_bias, "repetition_penalty": self.repetition_penalty,
                "presence_penalty": self.presence_penalty, "frequency_penalty": self.frequency_penalty,
                "min_p": self.min_p, "no_repeat_ngram_size": self.no_repeat_ngram_size}


def _per_row(name, value, batch, default, valid, expected):
    values = [default] * batch if value is None else (list(value) if isinstance(value, (list, tuple)) else
                                                      [value] * batch)
    if len(values) != batch:
        raise ValueError(f"`{name}`: expected one number or {batch} (one a row); got {len(values)}.")
    for v in values:
        if not isinstance(v, (int, float, np.integer, np.floating)) or isinstance(v, bool) or not math.isfinite(v) or not valid(v):
            raise ValueError(f"`{name}` must be {expected}; got {v!r}.")
    return np.asarray(values, "float32")
