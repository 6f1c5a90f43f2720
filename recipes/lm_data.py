"""Language-model data of the recipes: random windows of a token
stream (gpt_char, gpt_finetune) and the mean cross-entropy of a model's
logits, the figure the language-model recipes print."""


def mean_cross_entropy(model, inputs, targets, batch_size, weights=None):
    """The mean cross-entropy (nats) of `model`'s logits against `targets`,
    over every target (or weighted by `weights`), accumulated in float64
    batch by batch.

    Args:
        model: a model whose output is logits (..., V).
        inputs: a dict of arrays (N, ...), the model's named inputs.
        targets: int array (N, ...), the target ids.
        batch_size: int.
        weights: float array like `targets`, or None for all ones.

    Returns:
        float.
    """
    import numpy as np

    total, count = 0.0, 0.0
    for start in range(0, len(targets), batch_size):
        rows = slice(start, start + batch_size)
        logits = np.asarray(model.predict_on_batch({k: v[rows] for k, v in inputs.items()}), "float64")
        top = logits.max(axis=-1, keepdims=True)
        log_z = np.log(np.exp(logits - top).sum(axis=-1)) + top[..., 0]
        picked = np.take_along_axis(logits, np.asarray(targets[rows])[..., None], axis=-1)[..., 0]
        w = np.ones(picked.shape) if weights is None else np.asarray(weights[rows], "float64")
        total += float(((log_z - picked) * w).sum())
        count += float(w.sum())
    return total / max(count, 1.0)


def train_dataset(ids, batch_size, sequence_length, seed):
    """Endless random windows as the model's named inputs (no padding)."""
    import tensorflow as tf

    from zoo.data import language_model_windows

    def named(x, y):
        return {"token_ids": x, "padding_mask": tf.ones_like(x)}, y

    windows = language_model_windows(ids, batch_size, sequence_length, seed=seed)
    return windows.map(named, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def eval_inputs(ids, batch_size, sequence_length, num_batches, seed=0):
    """Fixed random windows of a language model: (named inputs, targets) arrays."""
    import numpy as np

    from zoo.data import language_model_eval_batches

    x, y = language_model_eval_batches(ids, batch_size, sequence_length, num_batches, seed=seed)
    return {"token_ids": x, "padding_mask": np.ones_like(x)}, y


def split_loss(recipe, folder, data, split, model, split_ids):
    """What the language-model recipes' `evaluate` computes: the mean
    cross-entropy of the run's model over fixed random windows of `split`
    ("train", the first 90% of the text, or "val", the rest).

    Args:
        recipe: the recipe's name, for the error of another split.
        folder, data, split, model: as the recipe's `evaluate`.
        split_ids: `(model, text, data, args) -> (train ids, val ids,
            window length)`, the recipe's own tokenization and split.

    Returns:
        `{"<split>_loss": float}`.
    """
    from zoo.data import DataError, read_text

    from recipes.run_folder import figure_name, load_model, read_run

    args = read_run(folder)["args"]
    if split not in ("train", "val"):
        raise DataError(f"--split {split}: {recipe} splits its text 90/10; expected 'train' or 'val'")
    model = model or load_model(folder)
    data = data or args["data"]
    train, val, length = split_ids(model, read_text(data), data, args)
    x, y = eval_inputs(train if split == "train" else val, args["batch_size"], length, args["eval_batches"], seed=0)
    return {figure_name("loss", split): mean_cross_entropy(model, x, y, args["batch_size"])}
