"""The learning-rate schedules against float64 references written from
their formulas: nanoGPT's warm-up + cosine (`get_lr` in its train.py) and
the Transformer's, Vaswani et al. 2017, eq. 3."""

import math

import keras
import numpy as np
import pytest

from zoo.training import TransformerSchedule, WarmupCosineDecay


def _np(x):
    return float(keras.ops.convert_to_numpy(x))


def warmup_cosine_reference(step, peak, warmup, decay, floor):
    """lr(t) = peak (t+1)/warmup for t < warmup; then the cosine from peak
    to floor over [warmup, decay]; floor after decay."""
    if step < warmup:
        return peak * (step + 1) / warmup
    if step > decay:
        return floor
    ratio = (step - warmup) / (decay - warmup)
    return floor + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (peak - floor)


def vaswani_reference(step, d_model, warmup, scale=1.0):
    """eq. 3 with the step counted from 1 (an optimizer's step 0 is the
    paper's step 1)."""
    s = step + 1
    return scale * d_model**-0.5 * min(s**-0.5, s * warmup**-1.5)


@pytest.mark.parametrize("peak, warmup, decay, floor", [(1e-3, 100, 2000, 1e-4), (6e-4, 10, 50, 0.0)])
def test_warmup_cosine_decay_matches_the_formula_at_every_step(peak, warmup, decay, floor):
    schedule = WarmupCosineDecay(peak, warmup, decay, floor)
    steps = sorted(set(range(0, decay + 50, max(1, decay // 200))) | {0, warmup - 1, warmup, decay - 1, decay, decay + 1})
    got = np.array([_np(schedule(s)) for s in steps])
    expected = np.array([warmup_cosine_reference(s, peak, warmup, decay, floor) for s in steps])
    # float32 arithmetic: relative to the peak near the floor.
    np.testing.assert_allclose(got, expected, rtol=2e-6, atol=1e-6 * peak)
    # The landmarks a reader checks by eye.
    assert _np(schedule(0)) == pytest.approx(peak / warmup, rel=1e-6)
    assert _np(schedule(warmup)) == pytest.approx(peak, rel=1e-6)
    assert _np(schedule((warmup + decay) / 2)) == pytest.approx((peak + floor) / 2, rel=1e-5)
    assert _np(schedule(decay + 1000)) == pytest.approx(floor, rel=1e-6, abs=1e-12)


def test_warmup_cosine_decay_is_a_function_of_the_optimizer_step():
    schedule = WarmupCosineDecay(1e-3, 4, 10, 1e-4)
    optimizer = keras.optimizers.SGD(schedule)
    variable = keras.Variable(np.zeros(3, "float32"))
    seen = []
    for _ in range(12):
        seen.append(_np(optimizer.learning_rate))
        optimizer.apply_gradients([(keras.ops.ones(3), variable)])
    np.testing.assert_allclose(seen, [warmup_cosine_reference(s, 1e-3, 4, 10, 1e-4) for s in range(12)], rtol=2e-6)
    # SGD moves the variable by the sum of the rates it was given.
    np.testing.assert_allclose(keras.ops.convert_to_numpy(variable), -sum(seen), rtol=1e-5)


@pytest.mark.parametrize("d_model, warmup, scale", [(512, 4000, 1.0), (256, 100, 2.0)])
def test_transformer_schedule_is_vaswani_equation_3(d_model, warmup, scale):
    schedule = TransformerSchedule(d_model, warmup, scale)
    steps = sorted(set(range(0, 3 * warmup, max(1, warmup // 50))) | {warmup - 2, warmup - 1, warmup, 10 * warmup})
    got = np.array([_np(schedule(s)) for s in steps])
    expected = np.array([vaswani_reference(s, d_model, warmup, scale) for s in steps])
    np.testing.assert_allclose(got, expected, rtol=2e-6)
    # Linear growth up to the peak at the paper's step `warmup`, then
    # inverse square root decay.
    peak = scale * (d_model * warmup) ** -0.5
    assert _np(schedule(warmup - 1)) == pytest.approx(peak, rel=1e-6)
    assert max(got) == pytest.approx(peak, rel=1e-6)
    assert _np(schedule(4 * warmup - 1)) == pytest.approx(peak / 2, rel=1e-6)


@pytest.mark.parametrize(
    "schedule", [WarmupCosineDecay(1e-3, 10, 100, 1e-5), TransformerSchedule(128, 40, 0.5)], ids=["cosine", "vaswani"]
)
def test_schedules_survive_serialization(schedule):
    revived = keras.optimizers.schedules.deserialize(keras.optimizers.schedules.serialize(schedule))
    assert type(revived) is type(schedule)
    for step in (0, 5, 39, 40, 99, 500):
        assert _np(revived(step)) == _np(schedule(step))
