"""Optimizers with the details that matter (nanoGPT's `configure_optimizers`)."""

import keras

# Weight decay applies to weight matrices only: not to biases, LayerNorm
# scales/offsets (nanoGPT decays every parameter of rank >= 2, embeddings included).
NO_DECAY = ("bias", "gamma", "beta")


def adamw(learning_rate, weight_decay=0.1, beta_1=0.9, beta_2=0.95, epsilon=1e-8, global_clipnorm=1.0, model=None,
          gradient_accumulation_steps=None):
    """AdamW that decays weight matrices only, with global-norm clipping.

    Args:
        model: if given, the variables of rank < 2 of this model are also
            excluded (a catch-all for custom layers' vectors).
        gradient_accumulation_steps: None (or 1) updates the weights every
            step; N >= 2 averages the gradients of N steps and updates
            once (Keras' accumulation: the optimizer's `iterations`, and so
            the learning-rate schedule, count updates).
    """
    optimizer = keras.optimizers.AdamW(
        learning_rate=learning_rate,
        weight_decay=weight_decay,
        beta_1=beta_1,
        beta_2=beta_2,
        epsilon=epsilon,
        global_clipnorm=global_clipnorm,
        gradient_accumulation_steps=gradient_accumulation_steps if gradient_accumulation_steps != 1 else None,
    )
    optimizer.exclude_from_weight_decay(var_names=list(NO_DECAY))
    if model is not None:
        optimizer.exclude_from_weight_decay(var_list=[v for v in model.trainable_variables if len(v.shape) < 2])
    return optimizer


@keras.saving.register_keras_serializable(package="zoo")
class AdamEMAWarmup(keras.optimizers.Adam):
    """Adam whose average of the weights (`use_ema`) warms its momentum up,
    as timm's `ModelEmaV3` does, so that the average does not lag behind
    the trained weights early in training:

        momentum(t) = min(ema_momentum, 1 - (t + 1) ** -ema_warmup)

    at update t = 0, 1, 2, ... (momentum 0 at the first update: the average
    starts as the weights, as Keras' does). `ema_warmup=0` is Keras'
    constant momentum. The update runs inside the compiled train step;
    `keras.callbacks.SwapEMAWeights` swaps the average in for validation
    and saving, as for Keras' own average.

    Args:
        ema_warmup: the power p of the warm-up (diffusers' `EMAModel`
            suggests 2/3 for runs of a million steps or more, 3/4 for
            shorter ones). 0: Keras' constant momentum.
        **kwargs: keras.optimizers.Adam's, `use_ema` and `ema_momentum`
            among them.
    """

    def __init__(self, *args, ema_warmup=2.0 / 3.0, **kwargs):
        super().__init__(*args, **kwargs)
        if ema_warmup < 0:
            raise ValueError(f"ema_warmup={ema_warmup}: expected a power >= 0 (0: no warm-up)")
        self.ema_warmup = float(ema_warmup)

    def average_momentum(self):
        """The momentum of this update (a float32 scalar)."""
        momentum = keras.ops.convert_to_tensor(self.ema_momentum, "float32")
        if self.ema_warmup == 0:  # Keras' own: the first update copies the weights
            return momentum * keras.ops.cast(keras.ops.not_equal(self.iterations, 0), "float32")
        t = keras.ops.cast(self.iterations, "float32") + 1.0
        return keras.ops.minimum(momentum, 1.0 - keras.ops.power(t, -self.ema_warmup))

    def _update_model_variables_moving_average(self, trainable_variables):
        """Keras' update (`BaseOptimizer._update_model_variables_moving_average`)
        with the warmed-up momentum."""
        if not self.use_ema:
            return
        momentum = self.average_momentum()
        for var, average in zip(trainable_variables, self._model_variables_moving_average):
            if average is not None:
                m = keras.ops.cast(momentum, var.dtype)
                average.assign(m * average + (1 - m) * var)

    def get_config(self):
        return {**super().get_config(), "ema_warmup": self.ema_warmup}
