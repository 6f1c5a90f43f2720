"""The samplers of `zoo.generate`: their names, the checks of their
settings, keras-hub's sampler of each, and the `--top-p` / `--top-k`
flags of the scripts.

Greedy, temperature, top-k and top-p sampling are keras-hub's samplers
(`keras_hub.samplers`, imported on first use, not with `zoo`; they do not
need TensorFlow); "beam" is `zoo.generation.beam.BeamSearch`.
"""

import numpy as np
from keras import ops

SAMPLERS = ("greedy", "temperature", "top_k", "top_p", "beam")


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
    if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or not temperature > 0:
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
    return ops.where(banned, ops.cast(-1e9, logits.dtype), logits)


def sampler_config(sampler, temperature, top_k, top_p, vocabulary_size):
    """The hashable configuration of a keras-hub sampler, checked:
    ("greedy",), ("temperature", t), ("top_k", t, top_k) or ("top_p", t, top_p)."""
    if sampler == "greedy":
        return ("greedy",)
    check_temperature(temperature)
    if sampler == "temperature":
        return ("temperature", float(temperature))
    if sampler == "top_k":
        if not isinstance(top_k, (int, np.integer)) or isinstance(top_k, bool) or not 1 <= top_k <= vocabulary_size:
            raise ValueError(
                f"`top_k` must be an integer in [1, {vocabulary_size}] (the vocabulary size); got {top_k!r}."
            )
        return ("top_k", float(temperature), int(top_k))
    if not isinstance(top_p, (int, float)) or isinstance(top_p, bool) or not 0 < top_p <= 1:
        raise ValueError(
            f"`top_p` must be in (0, 1] (top-p keeps the most likely tokens up to probability top_p); got {top_p!r}."
        )
    return ("top_p", float(temperature), float(top_p))


def keras_hub_sampler(config, seed=0):
    """keras-hub's sampler of a `sampler_config`; `seed` (an int, or None
    for a new one) starts its random state."""
    from keras_hub import samplers  # lazily: keras-hub is heavy to import

    name, *args = config
    if name == "greedy":
        return samplers.GreedySampler()
    if name == "temperature":
        return samplers.RandomSampler(temperature=args[0], seed=seed)
    if name == "top_k":
        return samplers.TopKSampler(k=args[1], temperature=args[0], seed=seed)
    return samplers.TopPSampler(p=args[1], temperature=args[0], seed=seed)


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
