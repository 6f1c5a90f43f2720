"""Optimizers with the details that matter (nanoGPT's `configure_optimizers`)."""

import keras

# Weight decay applies to weight matrices only: not to biases, LayerNorm
# scales/offsets (nanoGPT decays every parameter of rank >= 2, embeddings included).
NO_DECAY = ("bias", "gamma", "beta")


def adamw(learning_rate, weight_decay=0.1, beta_1=0.9, beta_2=0.95, epsilon=1e-8, global_clipnorm=1.0, model=None):
    """AdamW that decays weight matrices only, with global-norm clipping.

    Args:
        model: if given, the variables of rank < 2 of this model are also
            excluded (a catch-all for custom layers' vectors).
    """
    optimizer = keras.optimizers.AdamW(
        learning_rate=learning_rate,
        weight_decay=weight_decay,
        beta_1=beta_1,
        beta_2=beta_2,
        epsilon=epsilon,
        global_clipnorm=global_clipnorm,
    )
    optimizer.exclude_from_weight_decay(var_names=list(NO_DECAY))
    if model is not None:
        optimizer.exclude_from_weight_decay(var_list=[v for v in model.trainable_variables if len(v.shape) < 2])
    return optimizer
