"""The samplers of `zoo.generate`, each row its own: its sampler,
temperature, top-k, top-p and seed are arrays of B rows (`Sampling`), and
`choose` picks every row's token from them in `keras.ops` alone, so that
rows with different settings share one compiled step, and a row's tokens
depend on its own seed and settings, never on the rows beside it.

- greedy: the likeliest token (in the arrays, temperature 0).
- temperature: a draw from softmax(logits / temperature).
- top-k (Fan et al. 2018): a draw from the k likeliest tokens.
- top-p, nucleus sampling (Holtzman et al. 2020): a draw from the smallest
  set of the likeliest tokens whose probability is at least p.

A draw is the Gumbel-max trick: argmax over the kept tokens of
logits / temperature + g, g standard Gumbel noise, is a draw from the
softmax. The noise of row r at position t is Threefry-2x32 (Salmon et al.
2011, "Parallel random numbers: as easy as 1, 2, 3"; jax.random's
generator) of the counter (t, token id) under the key seed_r: its bits
depend on the row's seed and the position alone, not on the batch, the
step, the compiled function or the backend (the logits they perturb may
differ in their last bits between batch shapes, as the model's rounding
does; a token changes only where two candidates tie to that rounding).
"beam" is `zoo.generation.beam.BeamSearch`.

Shape letters: B rows, V vocabulary.
"""

import numpy as np
from keras import ops

from zoo import kernels

SAMPLERS = ("greedy", "temperature", "top_k", "top_p", "beam")

# A removed token's logit: finite, so that a row whose every token is
# removed still has a distribution (`controls.REMOVED` is the same).
REMOVED = -1e9


def check_name(sampler):
    if sampler not in SAMPLERS:
        raise ValueError(f"Unknown sampler {sampler!r}; expected one of {', '.join(map(repr, SAMPLERS))}.")


# Former keyword names of the samplers' settings: refused in one line that
# names the current one, so that a caller's old `k=40` is not silently lost.
RENAMED = {"k": "top_k", "p": "top_p"}


def refuse_renamed(kwargs, owner):
    """A TypeError for a former name in `kwargs` (`k`, `p`), naming its
    current one; for any other name, Python's own TypeError."""
    for former, current in RENAMED.items():
        if former in kwargs:
            raise TypeError(f"{owner}: `{former}` is renamed; pass {current}={kwargs[former]!r}.")
    if kwargs:
        raise TypeError(f"{owner}() got an unexpected keyword argument {next(iter(kwargs))!r}")


def check_temperature(temperature):
    if not isinstance(temperature, (int, float, np.floating)) or isinstance(temperature, bool) or not temperature > 0:
        raise ValueError(f"`temperature` must be a number > 0; got {temperature!r}.")


def check_suppressed(token_ids, vocabulary_size):
    """The sorted tuple of ids that are never chosen (transformers' single-token
    `bad_words_ids`, e.g. Marian's `<pad>`); a ValueError for one outside the vocabulary."""
    ids = tuple(sorted({int(t) for t in token_ids or ()}))
    for t in ids:
        if not 0 <= t < vocabulary_size:
            raise ValueError(f"Suppressed token id {t} is outside the vocabulary [0, {vocabulary_size}).")
    return ids


def suppress(logits, token_ids):
    """(B, V) logits with the columns of `token_ids` at -1e9 (finite, as beam
    search's scores), so that no sampler and no beam chooses them."""
    if not token_ids:
        return logits
    banned = np.zeros((1, logits.shape[-1]), bool)
    banned[0, list(token_ids)] = True
    return ops.where(banned, ops.cast(REMOVED, logits.dtype), logits)


class Sampling:
    """Each row's sampler and its settings, checked: one value for every
    row, or a list of B (one a row).

    Args:
        batch: B, the rows.
        vocabulary_size: V.
        sampler: "greedy", "temperature", "top_k" or "top_p".
        temperature: > 0 (read by every sampler but greedy).
        top_k: in [1, V] (read by "top_k").
        top_p: in (0, 1] (read by "top_p").
        seed: an int: row r draws with seed + r; a list: each row its own
            (an int, or None); None: a seed drawn from NumPy's global
            random state (`keras.utils.set_random_seed` sets it). A seed is
            taken modulo 2**64.

    Attributes:
        temperature: (B,) float32, 0 for a greedy row.
        top_k: (B,) int32, V where a row keeps every token.
        top_p: (B,) float32, 1 where a row keeps every token.
        key: (B, 2) int32, the bits of each row's seed (low word, high word).
        variant: `(sampled, filtered)`, what the compiled step needs: whether
            any row draws, and whether any row keeps fewer than V tokens
            (top-k or top-p). Either way a row chooses the same token.
    """

    def __init__(self, batch, vocabulary_size, sampler="greedy", temperature=1.0, top_k=50, top_p=0.9, seed=None):
        names = _rows("sampler", sampler, batch)
        for name in names:
            if name == "beam":
                raise ValueError("sampler='beam' decodes the whole batch by beam search; it is not a row's sampler.")
            check_name(name)
        temperatures, top_ks, top_ps = (_rows(n, v, batch) for n, v in
                                        (("temperature", temperature), ("top_k", top_k), ("top_p", top_p)))
        self.temperature = np.zeros(batch, "float32")
        self.top_k = np.full(batch, vocabulary_size, "int32")
        self.top_p = np.ones(batch, "float32")
        for row, name in enumerate(names):
            if name == "greedy":
                continue
            check_temperature(temperatures[row])
            self.temperature[row] = temperatures[row]
            if name == "top_k":
                k = top_ks[row]
                if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or not 1 <= k <= vocabulary_size:
                    raise ValueError(f"`top_k` must be an integer in [1, {vocabulary_size}] (the vocabulary size); "
                                     f"got {k!r}.")
                self.top_k[row] = k
            elif name == "top_p":
                p = top_ps[row]
                if not isinstance(p, (int, float, np.floating)) or isinstance(p, bool) or not 0 < p <= 1:
                    raise ValueError(f"`top_p` must be in (0, 1] (top-p keeps the most likely tokens up to "
                                     f"probability top_p); got {p!r}.")
                self.top_p[row] = p
        self.key = row_keys(seed, batch)
        self.variant = (bool((self.temperature > 0).any()),
                        bool((self.top_k < vocabulary_size).any() or (self.top_p < 1).any()))

    def arrays(self):
        """The dict that `choose` takes (NumPy arrays, B rows)."""
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p, "key": self.key}


def row_keys(seed, batch):
    """(B, 2) int32: the low and high 32 bits of each row's seed (see `Sampling`)."""
    if isinstance(seed, (list, tuple)):
        if len(seed) != batch:
            raise ValueError(f"`seed`: expected one integer or {batch} (one a row); got {len(seed)}.")
        seeds = [_check_seed(s) for s in seed]
        seeds = [int(np.random.randint(2**63, dtype="int64")) if s is None else s for s in seeds]
    else:
        first = _check_seed(seed)
        first = int(np.random.randint(2**63, dtype="int64")) if first is None else first
        seeds = [first + row for row in range(batch)]
    bits = np.array([[s % 2**32, (s % 2**64) >> 32] for s in seeds], "uint32").reshape(batch, 2)
    return bits.view("int32")


def _check_seed(seed):
    if seed is not None and (not isinstance(seed, (int, np.integer)) or isinstance(seed, (bool, np.bool_))):
        raise ValueError(f"`seed` must be an integer or None; got {seed!r}.")
    return None if seed is None else int(seed)


def _rows(name, value, batch):
    values = list(value) if isinstance(value, (list, tuple)) else [value] * batch
    if len(values) != batch:
        raise ValueError(f"`{name}`: expected one value or {batch} (one a row); got {len(values)}.")
    return values


# --- In the compiled step ------------------------------------------------------------------

def choose(logits, sampling, position, variant=(True, True)):
    """(B,) int32: each row's token.

    Args:
        logits: (B, V) float32, after the decoding controls.
        sampling: the dict of `Sampling.arrays()` (tensors).
        position: the position being chosen, the draw's counter: a scalar
            (possibly traced), or (B,) one a row.
        variant: `Sampling.variant`; (False, ...) compiles the argmax alone,
            (True, False) no top-k / top-p.
    """
    sampled, filtered = variant
    greedy = argmax(logits)
    if not sampled:
        return greedy
    temperature = sampling["temperature"]
    noise = gumbel(sampling["key"], position, logits.shape[-1])
    drawn = largest(tempered(logits, sampling, filtered) + noise)
    return ops.where(temperature > 0, drawn, greedy)


def argmax(values):
    """(B,) int32 index of each row's largest value (the first of equal
    ones), as `ops.argmax` for values that are not NaN: the row's maximum,
    then the least index holding it. Two plain reductions, which XLA's CPU
    backend runs vectorised, where `argmax`'s one reduction over (value,
    index) pairs took about 4 times as long over a 49,152-token
    vocabulary. A row of NaN gives the last index."""
    vocabulary = values.shape[-1]
    at_maximum = ops.equal(values, ops.max(values, axis=-1, keepdims=True))
    index = ops.expand_dims(ops.arange(vocabulary, dtype="int32"), 0)
    return ops.minimum(ops.min(ops.where(at_maximum, index, vocabulary), axis=-1), vocabulary - 1)


def largest(scores):
    """int32 index of the largest of the last axis's scores (the first of
    equal ones), as `argmax`, through `top_k`: on TensorFlow, XLA's CPU
    compiler takes tens of minutes over an argmax whose input, the Gumbel
    noise, is fused into the reduction (LLVM's loop-idiom pass digging the
    noise's rounds), where `top_k` reads its input computed first; on JAX
    with a CPU, in one read of the scores (`zoo.kernels.top_k`)."""
    return ops.cast(kernels.top_k(scores, 1)[1][..., 0], "int32")


def tempered(logits, sampling, filtered=True):
    """(B, V) the logits a row draws from: divided by its temperature (1
    for a greedy row), at `REMOVED` outside its top-k and top-p when
    `filtered`; their softmax is the row's sampling distribution."""
    temperature = sampling["temperature"]
    scaled = logits / ops.expand_dims(ops.where(temperature > 0, temperature, 1.0), 1)
    return top_k_top_p(scaled, sampling["top_k"], sampling["top_p"]) if filtered else scaled


def top_k_top_p(logits, top_k, top_p):
    """(B, V) logits at `REMOVED` outside each row's top-k, then outside the
    top-p nucleus of what is left: with the kept tokens' probabilities
    renormalised and sorted, most likely first, a token is kept while the
    probability before it is below p (the first one always). A token tied
    with the least one kept is kept too.

    Args:
        logits: (B, V) float32, at the sampler's temperature.
        top_k: (B,) int32, V keeps every token.
        top_p: (B,) float32, 1 keeps every token.
    """
    vocabulary = logits.shape[-1]
    ordered, _ = ops.top_k(logits, vocabulary)  # (B, V), most likely first
    rank = ops.expand_dims(ops.arange(vocabulary, dtype="int32"), 0)  # (1, V)
    in_top_k = ops.less(rank, ops.expand_dims(top_k, 1))  # (B, V)
    probabilities = ops.softmax(ops.where(in_top_k, ordered, REMOVED), axis=-1)
    cumulative = ops.cumsum(probabilities, axis=-1)
    before = ops.concatenate([ops.zeros_like(cumulative[:, :1]), cumulative[:, :-1]], axis=-1)  # (B, V)
    p = ops.expand_dims(top_p, 1)
    in_nucleus = ops.logical_or(ops.less(before, p), ops.greater_equal(p, 1.0))
    kept = ops.logical_and(in_top_k, in_nucleus)
    least = ops.min(ops.where(kept, ordered, np.inf), axis=-1, keepdims=True)  # (B, 1) the least kept logit
    return ops.where(ops.greater_equal(logits, least), logits, REMOVED)


def gumbel(key, position, vocabulary_size):
    """(B, V) standard Gumbel noise, -log(-log(u)): row r's uniform u of
    token v at `position` from Threefry-2x32 of the counter (position, v)
    under the key `key[r]`."""
    position = ops.reshape(ops.cast(position, "int32"), (-1, 1))  # (1, 1) or (B, 1)
    token = ops.expand_dims(ops.arange(vocabulary_size, dtype="int32"), 0)  # (1, V)
    bits, _ = threefry2x32((key[:, :1], key[:, 1:]), (position + ops.zeros_like(token), token))  # (B, V)
    high = ops.bitwise_and(ops.right_shift(bits, 8), 0xFFFFFF)  # the top 24 bits
    uniform = (ops.cast(high, "float32") + 0.5) * 2.0**-24  # in (0, 1)
    return -ops.log(-ops.log(uniform))


_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def threefry2x32(key, counter):
    """Threefry-2x32, 20 rounds (Salmon et al. 2011): the two 32-bit words
    of `counter` encrypted under the two of `key`, as `jax.random`'s
    `threefry_2x32` computes them. The words are int32 tensors holding the
    32 bits (addition wraps around; right shifts are masked to be logical),
    so that the same bits come on every backend."""
    k0, k1 = key
    keys = (k0, k1, ops.bitwise_xor(ops.bitwise_xor(k0, k1), 0x1BD11BDA))
    x0, x1 = counter[0] + k0, counter[1] + k1
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x0 = x0 + x1
            x1 = ops.bitwise_xor(_rotate_left(x1, r), x0)
        x0 = x0 + keys[(i + 1) % 3]
        x1 = x1 + keys[(i + 2) % 3] + (i + 1)
    return x0, x1


def _rotate_left(x, r):
    return ops.bitwise_or(ops.left_shift(x, r), ops.bitwise_and(ops.right_shift(x, 32 - r), (1 << r) - 1))


def sampler_options(top_p=None, top_k=None):
    """The sampler of a script's `--top-p P` / `--top-k K` flags, as
    keyword arguments of `zoo.generate`: nucleus sampling with P, else
    top-k with K, else plain temperature sampling.

    Example:
    ```python
    zoo.generate(lm, "ROMEO:", max_length=100, seed=0, **sampler_options(top_k=40))
    ```
    """
    if top_p is not None:
        return {"sampler": "top_p", "top_p": top_p}
    if top_k is not None:
        return {"sampler": "top_k", "top_k": top_k}
    return {"sampler": "temperature"}
