"""`adamw`: which variables it decays, and by how much, checked through
what an update does to them (zero gradients: Adam moves nothing, so every
change is the decoupled weight decay, w <- w (1 - lr * wd))."""

import keras
import numpy as np
import pytest

from zoo.training import adamw

LR, WD = 0.1, 0.5


class Scaled(keras.layers.Layer):
    """A custom layer with a vector that is neither a bias nor a norm's."""

    def build(self, input_shape):
        self.scale = self.add_weight(name="scale", shape=(input_shape[-1],), initializer="ones")
        self.matrix = self.add_weight(name="matrix", shape=(input_shape[-1], 3), initializer="glorot_uniform")

    def call(self, x):
        return (x * self.scale) @ self.matrix


def _model():
    inputs = keras.Input((5,), dtype="int32")
    x = keras.layers.Embedding(20, 8, name="embedding")(inputs)
    x = keras.layers.Dense(8, name="dense")(x)
    x = keras.layers.LayerNormalization(name="norm")(x)
    x = Scaled(name="custom")(x)
    model = keras.Model(inputs, x)
    rng = np.random.default_rng(0)
    for w in model.trainable_variables:  # no zeros, so that a decay shows everywhere
        w.assign(rng.uniform(0.5, 1.5, w.shape).astype("float32"))
    return model


def _decayed_after_one_step(optimizer, model):
    before = {w.path: keras.ops.convert_to_numpy(w).copy() for w in model.trainable_variables}
    optimizer.apply_gradients([(keras.ops.zeros(w.shape), w) for w in model.trainable_variables])
    out = {}
    for w in model.trainable_variables:
        after = keras.ops.convert_to_numpy(w)
        if np.array_equal(after, before[w.path]):
            out[w.path] = False
        else:
            np.testing.assert_allclose(after, before[w.path] * (1 - LR * WD), rtol=1e-6, err_msg=w.path)
            out[w.path] = True
    return out


def test_adamw_decays_matrices_and_embeddings_not_biases_or_norms():
    model = _model()
    decayed = _decayed_after_one_step(adamw(LR, weight_decay=WD), model)
    assert decayed == {
        "embedding/embeddings": True,  # nanoGPT decays every tensor of rank >= 2
        "dense/kernel": True,
        "dense/bias": False,
        "norm/gamma": False,
        "norm/beta": False,
        "custom/scale": True,  # only the model-wide rule below catches this one
        "custom/matrix": True,
    }


def test_adamw_with_the_model_exempts_every_vector():
    model = _model()
    decayed = _decayed_after_one_step(adamw(LR, weight_decay=WD, model=model), model)
    assert {path for path, d in decayed.items() if d} == {"embedding/embeddings", "dense/kernel", "custom/matrix"}


def test_adamw_decays_a_zoo_model_as_nanogpt_does():
    import zoo

    model = zoo.build("gpt-nano", task="causal_lm", use_bias=True)
    decayed = _decayed_after_one_step(adamw(LR, weight_decay=WD, model=model), model)
    for w in model.trainable_variables:
        assert decayed[w.path] == (len(w.shape) >= 2), (w.path, w.shape)


@pytest.mark.parametrize("clip", [1.0, 0.25, 100.0])
def test_adamw_clips_the_global_gradient_norm(clip):
    # beta_1 = beta_2 = 0 make Adam's step lr * g / (|g| + eps); a large eps
    # keeps it proportional to the (clipped) gradient, so the clipping shows.
    eps = 1e4
    gradients = [np.array([3.0, 0.0, 4.0]), np.full((2, 2), 6.0)]  # global norm 13
    variables = [keras.Variable(np.zeros(g.shape, "float32")) for g in gradients]
    optimizer = adamw(1.0, weight_decay=0.0, beta_1=0.0, beta_2=0.0, epsilon=eps, global_clipnorm=clip)
    optimizer.apply_gradients([(keras.ops.convert_to_tensor(g.astype("float32")), v) for g, v in zip(gradients, variables)])
    factor = min(1.0, clip / 13.0)
    for g, v in zip(gradients, variables):
        clipped = g * factor
        np.testing.assert_allclose(keras.ops.convert_to_numpy(v), -clipped / (np.abs(clipped) + eps), rtol=1e-5)
