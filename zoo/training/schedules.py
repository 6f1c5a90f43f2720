"""Learning-rate schedules of the papers and of nanoGPT."""

import math

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="zoo")
class WarmupCosineDecay(keras.optimizers.schedules.LearningRateSchedule):
    """nanoGPT's schedule: linear warm-up to `peak`, cosine decay to `floor`
    at `decay_steps`, constant after.

    lr(t) = peak * (t+1) / warmup                       for t < warmup
          = floor + (peak - floor) * 0.5 (1 + cos(pi r)) r = (t - warmup) / (decay - warmup)
    """

    def __init__(self, peak, warmup_steps, decay_steps, floor):
        self.peak, self.warmup_steps, self.decay_steps, self.floor = peak, warmup_steps, decay_steps, floor

    def __call__(self, step):
        step = ops.cast(step, "float32")
        warm = self.peak * (step + 1.0) / max(self.warmup_steps, 1)
        ratio = ops.clip((step - self.warmup_steps) / max(self.decay_steps - self.warmup_steps, 1), 0.0, 1.0)
        cosine = self.floor + 0.5 * (1.0 + ops.cos(math.pi * ratio)) * (self.peak - self.floor)
        return ops.where(step < self.warmup_steps, warm, cosine)

    def get_config(self):
        return {"peak": self.peak, "warmup_steps": self.warmup_steps, "decay_steps": self.decay_steps, "floor": self.floor}


@keras.saving.register_keras_serializable(package="zoo")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Vaswani et al. 2017, eq. 3: lrate = scale * d_model^-0.5 *
    min(step^-0.5, step * warmup^-1.5), with step counted from 1."""

    def __init__(self, d_model, warmup_steps=4000, scale=1.0):
        self.d_model, self.warmup_steps, self.scale = d_model, warmup_steps, scale

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        return self.scale * self.d_model**-0.5 * ops.minimum(ops.rsqrt(step), step * self.warmup_steps**-1.5)

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale}
