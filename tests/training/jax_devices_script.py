"""One train step of each family on 4 virtual CPU devices under JAX, against
the same step on one device: `python -m tests.training.jax_devices_script
STRATEGY...` (data-parallel, model-parallel) prints one `RESULT {json}`
line, the results by strategy.

JAX fixes its device count when it starts, so this runs in a fresh
interpreter (tests/training/test_jax_devices.py starts it). Every family
trains on a batch of 8 whose padding differs from shard to shard (the first
four rows full, the last four nearly empty), so a loss averaged per shard
instead of over the global batch would show. SGD at learning rate 1 makes
the updated weights the gradients, compared one by one.
"""

import json
import os
import sys

os.environ["KERAS_BACKEND"] = "jax"
os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"

import keras  # noqa: E402
import numpy as np  # noqa: E402

import zoo  # noqa: E402
from zoo.models.sharding import get_layout_map  # noqa: E402
from zoo.training import MaskedSparseCrossentropy, distribution_scope  # noqa: E402

B, T = 8, 8
LENGTHS = [8, 8, 8, 8, 3, 1, 2, 1]  # real tokens per row: shards 0-1 full, 2-3 nearly empty


def _padding():
    return np.array([[1] * n + [0] * (T - n) for n in LENGTHS], "int32")


def gpt():
    rng, mask = np.random.default_rng(0), _padding()
    x = {"token_ids": rng.integers(1, 100, (B, T)).astype("int32") * mask, "padding_mask": mask}
    y = rng.integers(1, 100, (B, T)).astype("int32") * mask
    return zoo.build("gpt-nano", task="causal_lm"), x, y, MaskedSparseCrossentropy()


def llama():
    rng, mask = np.random.default_rng(3), _padding()
    x = {"token_ids": rng.integers(1, 100, (B, T)).astype("int32") * mask, "padding_mask": mask}
    y = rng.integers(1, 100, (B, T)).astype("int32") * mask
    return zoo.build("llama-nano", task="causal_lm"), x, y, MaskedSparseCrossentropy()


def gemma():
    rng, mask = np.random.default_rng(4), _padding()
    x = {"token_ids": rng.integers(1, 100, (B, T)).astype("int32") * mask, "padding_mask": mask}
    y = rng.integers(1, 100, (B, T)).astype("int32") * mask
    return zoo.build("gemma3-nano", task="causal_lm"), x, y, MaskedSparseCrossentropy()


def bert():
    rng, mask = np.random.default_rng(1), _padding()
    x = {
        "token_ids": rng.integers(5, 100, (B, T)).astype("int32") * mask,
        "segment_ids": np.zeros((B, T), "int32"),
        "padding_mask": mask,
        "mask_positions": np.array([[1, 2, 5]] * 4 + [[0, 1, 0]] * 4, "int32"),
    }
    y = rng.integers(1, 100, (B, 3)).astype("int32")
    y[4:, 1:] = 0  # fewer masked tokens in the second half: label 0 is padding
    return zoo.build("bert-tiny", task="masked_lm"), x, y, MaskedSparseCrossentropy()


def transformer():
    rng, mask = np.random.default_rng(2), _padding()
    x = {
        "encoder_token_ids": rng.integers(4, 1000, (B, T)).astype("int32") * mask,
        "encoder_padding_mask": mask,
        "decoder_token_ids": rng.integers(4, 1000, (B, T)).astype("int32") * mask,
        "decoder_padding_mask": mask,
    }
    y = rng.integers(4, 1000, (B, T)).astype("int32") * mask
    return zoo.build("transformer-tiny"), x, y, MaskedSparseCrossentropy()


FAMILIES = {"gpt": gpt, "llama": llama, "gemma": gemma, "bert": bert, "transformer": transformer}


def one_step(family):
    """(model, loss, updated weights) of one SGD step, built and compiled
    under whatever distribution is set."""
    keras.utils.set_random_seed(7)
    model, x, y, loss = FAMILIES[family]()
    model.compile(optimizer=keras.optimizers.SGD(1.0), loss=loss)
    before = {v.path: np.asarray(v.value) for v in model.weights}
    value = float(model.train_on_batch(x, y))
    after = {v.path: np.asarray(v.value) for v in model.weights}
    update = max(float(np.max(np.abs(after[path] - before[path]))) for path in after)
    return model, value, after, update


def generated(model):
    """Greedy continuations of two prompts (decoder-only and encoder-decoder)."""
    if model.is_encoder_decoder:
        out = zoo.generate(model, [[1]] * 2, 5, source=[[5, 6, 7, 8], [9, 10]])
    else:
        out = zoo.generate(model, [[5, 6, 7], [8, 9]], 5)
    return [list(map(int, s)) for s in out.sequences]


def sharding(variable):
    value = variable.value
    return {
        "devices": len(value.sharding.device_set),
        "spec": [None if axis is None else str(axis) for axis in getattr(value.sharding, "spec", ())],
        "shard_shape": list(value.addressable_shards[0].data.shape),
        "shape": list(value.shape),
    }


def main(strategies):
    """One step of every family on one device, then under each strategy in
    turn (each sets the distribution for what follows, as `fit` needs)."""
    result = {"devices": len(keras.distribution.list_devices())}
    references = {}
    for family in FAMILIES:  # one device: no distribution set yet
        model, loss, weights, _ = one_step(family)
        references[family] = (loss, weights, generated(model) if family != "bert" else None)
    for strategy in strategies:
        with distribution_scope(strategy, mesh="2x2", layout_map=get_layout_map):
            pass
        result[strategy] = {family: step_under_strategy(family, references[family]) for family in FAMILIES}
    print("RESULT " + json.dumps(result))


def step_under_strategy(family, reference):
    model, loss, weights, update = one_step(family)
    reference_loss, reference_weights, reference_generated = reference
    differences = {path: float(np.max(np.abs(weights[path] - reference_weights[path]))) for path in weights}
    kernels = {v.path: sharding(v) for v in model.weights if v.path.endswith("kernel") or "embeddings" in v.path}
    return {
        "loss": loss,
        "reference_loss": reference_loss,
        "largest_weight_difference": max(differences.values()),
        "largest_update": update,
        "weights": len(weights),
        "sharding": kernels,
        "generated": generated(model) if reference_generated is not None else None,
        "reference_generated": reference_generated,
    }


if __name__ == "__main__":
    main(sys.argv[1:])
