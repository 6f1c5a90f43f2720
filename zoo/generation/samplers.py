"""The samplers of `zoo.generate`: their names, the checks of their
settings, keras-hub's sampler of each, and the `--top-p` / `--top-k`
flags of the scripts.

Greedy, temperature, top-k and top-p sampling are keras-hub's samplers
(`keras_hub.samplers`, imported on first use, not with `zoo`; they do not
need TensorFlow); "beam" is `zoo.generation.beam.BeamSearch`.
"""

import numpy as np

SAMPLERS = ("greedy", "temperature", "top_k", "top_p", "beam")


def check_name(sampler):
    if sampler not in SAMPLERS:
        raise ValueError(f"Unknown sampler {sampler!r}; expected one of {', '.join(map(repr, SAMPLERS))}.")


def check_temperature(temperature):
    if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or not temperature > 0:
        raise ValueError(f"`temperature` must be a number > 0; got {temperature!r}.")


def sampler_config(sampler, temperature, k, p, vocabulary_size):
    """The hashable configuration of a keras-hub sampler, checked:
    ("greedy",), ("temperature", t), ("top_k", t, k) or ("top_p", t, p)."""
    if sampler == "greedy":
        return ("greedy",)
    check_temperature(temperature)
    if sampler == "temperature":
        return ("temperature", float(temperature))
    if sampler == "top_k":
        if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or not 1 <= k <= vocabulary_size:
            raise ValueError(f"`k` must be an integer in [1, {vocabulary_size}] (the vocabulary size); got {k!r}.")
        return ("top_k", float(temperature), int(k))
    if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0 < p <= 1:
        raise ValueError(f"`p` must be in (0, 1] (top-p keeps the most likely tokens up to probability p); got {p!r}.")
    return ("top_p", float(temperature), float(p))


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
        return {"sampler": "top_p", "p": top_p}
    if top_k is not None:
        return {"sampler": "top_k", "k": top_k}
    return {"sampler": "temperature"}
