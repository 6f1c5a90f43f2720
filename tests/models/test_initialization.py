"""A model built from scratch starts with each weight drawn on its own
(`zoo.layers.initializers.fresh`): no two blocks alike, no two
projections of a block alike, as keras-hub's and transformers' models
start."""

import keras
import numpy as np
import pytest

import zoo
from zoo.layers.initializers import fresh

FAMILIES = [
    ("gpt-nano", {"task": "causal_lm"}),
    ("llama-nano", {"task": "causal_lm"}),
    ("gemma3-nano", {"task": "causal_lm"}),
    ("transformer-tiny", {}),
    ("bert-tiny", {}),
]


@pytest.mark.parametrize("name,kwargs", FAMILIES, ids=[name for name, _ in FAMILIES])
def test_no_two_random_weights_start_alike(name, kwargs):
    keras.utils.set_random_seed(0)
    model = zoo.build(name, vocabulary_size=48, **kwargs)
    drawn = [(v.path, np.asarray(v.numpy(), "float64").ravel()) for v in model.weights
             if len(v.shape) >= 2 and np.std(v.numpy()) > 0]
    assert len(drawn) >= 6
    for i, (path, values) in enumerate(drawn):
        for other_path, other in drawn[:i]:
            n = min(len(values), len(other), 256)
            # Independent draws: their first values are not equal (nor do
            # they start alike, as one seed's draws of two shapes would).
            assert not np.allclose(values[:n], other[:n]), f"{path} starts as {other_path} does"


def test_fresh_draws_anew_unless_seeded():
    keras.utils.set_random_seed(0)
    shared = keras.initializers.RandomNormal(stddev=0.02)
    a, b = fresh(shared)((4, 4)), fresh(shared)((4, 4))
    assert not np.allclose(np.asarray(a), np.asarray(b))
    assert fresh(shared).get_config() == shared.get_config()
    seeded = keras.initializers.RandomNormal(stddev=0.02, seed=7)
    np.testing.assert_array_equal(np.asarray(fresh(seeded)((4, 4))), np.asarray(seeded((4, 4))))
    assert fresh("zeros").get_config() == keras.initializers.Zeros().get_config()
    assert fresh(None) is None
