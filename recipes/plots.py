"""The pictures of a run: learning curves by step, attention heat maps."""

from pathlib import Path

from recipes.run_folder import CURVES, HISTORY, read_history


def plot_curves(history, path, title="", learning_rate=None):
    """The learning curves by step (train and validation of each figure),
    and a panel of the learning rate.

    Args:
        history: dict of lists, as `read_history` gives (columns `step`,
            `learning_rate`, `loss`, `val_loss`, ...); without `step`, the
            epoch number stands in.
        path: where to write the PNG.
        title: str.
        learning_rate: None, or a callable step -> rate (the optimizer's
            schedule), drawn at every step rather than at epoch ends.

    Returns:
        `path`.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    steps = history.get("step") or list(range(1, len(next(iter(history.values()), [])) + 1))
    skip = {"step", "epoch", "learning_rate"}
    metrics = [k for k in history if not k.startswith("val_") and k not in skip]
    panels = len(metrics) + 1
    fig, axes = plt.subplots(1, panels, figsize=(4.5 * panels, 3.4), squeeze=False)
    for ax, key in zip(axes[0], metrics):
        ax.plot(steps, history[key], marker=".", label=key)
        if f"val_{key}" in history:
            ax.plot(steps, history[f"val_{key}"], marker=".", label=f"val_{key}")
        ax.set_xlabel("step")
        ax.set_title(key)
        ax.legend()
    ax = axes[0][-1]
    last = int(max(steps)) if len(steps) else 0
    if learning_rate is not None and last > 0:
        grid = np.unique(np.linspace(0, last, num=min(last + 1, 300)).astype("int64"))
        ax.plot(grid, [float(np.asarray(learning_rate(int(s)))) for s in grid])
    elif "learning_rate" in history:
        ax.plot(steps, history["learning_rate"], marker=".")
    ax.set_xlabel("step")
    ax.set_title("learning rate")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def schedule_of(model):
    """The optimizer's learning-rate schedule as a callable step -> float,
    or None when the rate is a constant (or the model has no optimizer).
    The schedule comes back from the optimizer's config, its public
    record of what it was built with."""
    import keras

    optimizer = getattr(model, "optimizer", None)
    rate = optimizer.get_config()["learning_rate"] if optimizer is not None else None
    if not isinstance(rate, dict):
        return None
    schedule = keras.optimizers.schedules.deserialize(rate)
    return lambda step: keras.ops.convert_to_numpy(schedule(step))


def write_curves(folder, model, title):
    """curves.png of the run's history.csv."""
    return plot_curves(read_history(Path(folder / HISTORY)), folder / CURVES, title, schedule_of(model))


def plot_attention(scores, query_tokens, key_tokens, path, title=""):
    """An attention heat map per head: scores (h, T, S), tokens on the axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    scores = np.asarray(scores)
    heads = scores.shape[0]
    fig, axes = plt.subplots(1, heads, figsize=(3.2 * heads + 1, 3.6), squeeze=False)
    for h, ax in enumerate(axes[0]):
        ax.imshow(scores[h], cmap="viridis", vmin=0.0)
        ax.set_xticks(range(len(key_tokens)), key_tokens, rotation=90, fontsize=7)
        ax.set_yticks(range(len(query_tokens)), query_tokens, fontsize=7)
        ax.set_title(f"head {h}")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
