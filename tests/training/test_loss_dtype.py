"""Under mixed precision the language-model loss never holds a float32 copy
of the (B, T, V) logits (3.3 GB per step for GPT-2 at batch 16 x 1024), and
its values and gradients stay those of a float64 reference.

How "never holds" is checked: the optimized HLO of a CPU compile cannot
tell, because XLA's CPU backend upcasts every bfloat16 reduction, scatter
and matmul output to float32 whatever the program says. So the check reads
the program itself - the jaxpr of Keras' whole JAX train step (forward,
loss, gradients, metrics, AdamW) - and asserts that every float32
(B, T, V) value is one that a GPU compiler fuses away: made by an
elementwise op and read only by elementwise ops or reductions (XLA's loop
and reduction fusions), never an input or output of the step, never the
operand of a gather, scatter, matmul or loop. A float32 cast followed by
`log_softmax` and `take_along_axis` (the obvious formula) fails it, which
the last test shows.

These checks trace JAX programs: `make test` runs this file on the JAX
backend, and on another backend they skip.
"""

import keras
import numpy as np
import pytest

from zoo.training import MaskedAccuracy, MaskedSparseCrossentropy

JAX = keras.backend.backend() == "jax"
only_jax = pytest.mark.skipif(not JAX, reason="traces JAX programs; make test runs this file under JAX")
# B, T, V chosen so that (3, 7, 97) names the logits and nothing else.
B, T, V = 3, 7, 97

ELEMENTWISE = {
    "abs", "add", "add_any", "and", "bitcast_convert_type", "broadcast_in_dim", "convert_element_type", "copy", "copy_p", "cos", "div",
    "eq", "exp", "exp2", "expand_dims", "expm1", "ge", "gt", "integer_pow", "le", "log", "log1p", "logistic", "lt",
    "max", "min", "mul", "ne", "neg", "not", "or", "pow", "reshape", "rsqrt", "select_n", "sign", "sin", "sqrt",
    "square", "squeeze", "stop_gradient", "sub", "tanh",
}
REDUCTIONS = {"reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "argmax", "argmin"}


def unfusable_float32_logits(closed_jaxpr, shape=(B, T, V)):
    """The float32 values of `shape` in a jaxpr (calls inlined) that a
    fusing compiler must write to memory: each as 'producer -> consumers'."""
    from jax.extend import core

    producers, consumers, boundary = {}, {}, set()

    def key(var):
        return None if isinstance(var, core.Literal) else id(var)

    def walk(jaxpr, rename):
        def name(var):
            return rename.get(key(var), key(var))

        for eqn in jaxpr.eqns:
            inner = next((p for p in eqn.params.values() if _is_call_body(p, eqn)), None)
            if inner is not None:  # pjit, custom_jvp/vjp calls, remat: inline
                body = getattr(inner, "jaxpr", inner)
                mapping = {key(v): name(a) for v, a in zip(body.invars, eqn.invars) if key(a) is not None}
                walk(body, mapping)
                for outer, inner_out in zip(eqn.outvars, body.outvars):
                    rename[key(outer)] = mapping.get(key(inner_out), key(inner_out))
                continue
            for var in eqn.invars:
                if key(var) is not None:
                    consumers.setdefault(name(var), []).append(eqn.primitive.name)
            for var in eqn.outvars:
                producers[name(var)] = (eqn.primitive.name, var.aval)

    jaxpr = closed_jaxpr.jaxpr
    walk(jaxpr, {})
    boundary = {id(v) for v in jaxpr.invars} | {id(v) for v in jaxpr.outvars if not isinstance(v, core.Literal)}
    found = []
    for var, (primitive, aval) in producers.items():
        if str(getattr(aval, "dtype", "")) != "float32" or tuple(getattr(aval, "shape", ())) != shape:
            continue
        readers = consumers.get(var, [])
        if (
            var in boundary
            or primitive not in ELEMENTWISE
            or any(r not in ELEMENTWISE | REDUCTIONS for r in readers)
        ):
            found.append(f"{primitive} -> {readers}{' (step output)' if var in boundary else ''}")
    return found


def _is_call_body(param, eqn):
    from jax.extend import core

    body = getattr(param, "jaxpr", param)
    return (
        isinstance(body, core.Jaxpr)
        and len(body.invars) == len(eqn.invars)
        and len(body.outvars) == len(eqn.outvars)
        and eqn.primitive.name not in ("scan", "while", "cond")
    )


def train_step_jaxpr(loss):
    """The jaxpr of Keras' JAX train step of a 1-block GPT under
    mixed_bfloat16 on one (B, T) batch."""
    import jax

    import zoo

    keras.config.set_dtype_policy("mixed_bfloat16")
    model = zoo.build(
        "gpt-nano", task="causal_lm", vocabulary_size=V, num_layers=1, hidden_dim=16, num_heads=2,
        max_sequence_length=T, dropout=0.0,
    )
    model.compile(keras.optimizers.AdamW(1e-3), loss, metrics=[MaskedAccuracy()], jit_compile=True)
    rng = np.random.default_rng(0)
    x = {"token_ids": rng.integers(1, V, (B, T)).astype("int32"), "padding_mask": np.ones((B, T), "int32")}
    y = rng.integers(0, V, (B, T)).astype("int32")
    model.optimizer.build(model.trainable_variables)
    model.evaluate(x, y, verbose=0)  # builds the metrics
    state = tuple(
        [v.value for v in variables]
        for variables in (model.trainable_variables, model.non_trainable_variables, model.optimizer.variables,
                          model.metrics_variables)
    )
    assert model(x).dtype == "bfloat16"
    return jax.make_jaxpr(lambda state, data: model.train_step(state, data))(state, (x, y))


class Float32LogSoftmax(keras.losses.Loss):
    """The formula this loss replaced: log_softmax of a float32 copy."""

    def call(self, y_true, y_pred):
        log_probs = keras.ops.log_softmax(keras.ops.cast(y_pred, "float32"), axis=-1)  # (B, T, V) float32
        labels = keras.ops.cast(y_true, "int32")[..., None]
        return -keras.ops.mean(keras.ops.take_along_axis(log_probs, labels, axis=-1))


@only_jax
def test_mixed_precision_train_step_has_no_float32_logits():
    found = unfusable_float32_logits(train_step_jaxpr(MaskedSparseCrossentropy(label_smoothing=0.1)))
    assert found == [], found


@only_jax
def test_the_check_finds_a_float32_log_softmax():
    found = unfusable_float32_logits(train_step_jaxpr(Float32LogSoftmax()))
    assert any("gather" in line or "scatter" in line for line in found), found


def bfloat16_logits(rng):
    logits = 4.0 * rng.normal(size=(B, T, V))
    return keras.ops.convert_to_numpy(keras.ops.cast(keras.ops.convert_to_tensor(logits, "float32"), "bfloat16"))


def reference(labels, logits, smoothing, pad_id=0):
    """float64: the loss, its gradient with respect to the logits, and the
    size of the two terms of that gradient (softmax and target), which
    bound its rounding error."""
    logits = np.asarray(logits, "float64")
    shifted = logits - logits.max(-1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    target = (1.0 - smoothing) * np.eye(V)[labels] + smoothing / V
    real = (labels != pad_id).astype("float64")
    count = max(real.sum(), 1.0)
    loss = (-(target * log_p).sum(-1) * real).sum() / count
    gradient = (np.exp(log_p) - target) * real[..., None] / count
    terms = (np.exp(log_p) + target) * real[..., None] / count
    return loss, gradient, terms


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_bfloat16_logits_give_the_float64_loss(smoothing):
    rng = np.random.default_rng(int(10 * smoothing))
    labels = rng.integers(0, V, (B, T)).astype("int32")  # label 0 is padding
    logits = bfloat16_logits(rng)
    assert str(logits.dtype) == "bfloat16"
    loss = MaskedSparseCrossentropy(label_smoothing=smoothing)
    value = float(keras.ops.convert_to_numpy(loss(labels, logits)))
    expected, _, _ = reference(labels, logits.astype("float64"), smoothing)
    # float32 sums of the bfloat16 inputs: float32's error, not bfloat16's.
    assert value == pytest.approx(expected, rel=1e-5)
    as_float32 = float(keras.ops.convert_to_numpy(loss(labels, logits.astype("float32"))))
    assert value == pytest.approx(as_float32, rel=1e-6)


@only_jax
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_gradient_of_bfloat16_logits_matches_float64(smoothing):
    import jax

    rng = np.random.default_rng(3)
    labels = rng.integers(0, V, (B, T)).astype("int32")
    logits = bfloat16_logits(rng)
    loss = MaskedSparseCrossentropy(label_smoothing=smoothing)
    gradient = jax.grad(lambda z: loss(labels, z))(logits)
    assert str(gradient.dtype) == "bfloat16"  # no float32 (B, T, V) cotangent either
    _, expected, terms = reference(labels, logits.astype("float64"), smoothing)
    # The softmax and target terms are each rounded to bfloat16 (8 bits,
    # half an ulp <= 2^-9 of a term) and summed in bfloat16 (once more).
    error = np.abs(np.asarray(gradient, "float64") - expected)
    assert np.all(error <= 3 * 2**-9 * terms + 1e-7), (error / terms).max()

