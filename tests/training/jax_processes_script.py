"""One process of `test_jax_processes`: gpt-nano trains STEPS SGD steps
under `--strategy data-parallel` on JAX, then saves its weights and losses.

    KERAS_DISTRIBUTION_JOB_ADDRESSES=127.0.0.1:PORT KERAS_DISTRIBUTION_NUM_PROCESSES=2 \\
    KERAS_DISTRIBUTION_PROCESS_ID=0 python -m tests.training.jax_processes_script data-parallel OUT.npz
    python -m tests.training.jax_processes_script default OUT.npz    # one process, one device
    ... data-parallel OUT.npz BACKUP_DIR [KILL_AFTER_EPOCH]            # EPOCHS epochs, resumable

With BACKUP_DIR the process trains EPOCHS epochs of the same batches with
`zoo.training.Backup` in BACKUP_DIR (each process its own, as the recipes'
run folders); with KILL_AFTER_EPOCH it dies (exit status 3, no cleanup)
once that epoch's backup is committed, as a preempted host does.

Every process builds the same pipeline of global batches of B rows; Keras
gives each process its share of each batch (`DataParallel` shards a
tf.data pipeline per process). The padding differs from row to row, so a
loss averaged per process instead of over the global batch would show.
Each process has two virtual CPU devices.
"""

import os
import sys

os.environ["KERAS_BACKEND"] = "jax"
os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from tests.recipes.multi_worker_script import StepLosses  # noqa: E402  (the loss of each step)

B, T, V, STEPS, EPOCHS = 8, 12, 50, 3, 3
LENGTHS = [12, 12, 12, 12, 4, 1, 3, 2]  # real tokens per row of each global batch


def global_batches():
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, V, (STEPS * B, T + 1)).astype("int32")
    mask = np.array([[1] * n + [0] * (T - n) for n in LENGTHS] * STEPS, "int32")
    return {"token_ids": tokens[:, :-1] * mask, "padding_mask": mask}, tokens[:, 1:] * mask


class Die(keras.callbacks.Callback):
    """Ends the process abruptly after epoch `epoch` (0-based), once the
    callbacks before it in the list (the backup) have run."""

    def __init__(self, epoch):
        super().__init__()
        self.epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        if epoch == self.epoch:
            sys.stdout.flush()
            os._exit(3)


def main(strategy, output, backup=None, kill_after_epoch=None):
    import tensorflow as tf

    import zoo
    from zoo.training import Backup, MaskedSparseCrossentropy, distribution_scope, start_distribution
    from zoo.training.distribution import is_chief

    start_distribution(strategy, batch_size=B)  # several processes: joins them first
    keras.utils.set_random_seed(0)
    with distribution_scope(strategy):
        model = zoo.build("gpt-nano", "causal_lm", vocabulary_size=V, dropout=0.0)
        model.compile(keras.optimizers.SGD(1.0), MaskedSparseCrossentropy())
    x, y = global_batches()
    before = [np.asarray(v.value.addressable_shards[0].data) for v in model.weights]
    losses = StepLosses()
    callbacks = [losses]
    if backup is not None:
        callbacks.append(Backup(backup, delete_checkpoint=False))
        if kill_after_epoch is not None:
            callbacks.append(Die(int(kill_after_epoch)))
    model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(B), epochs=1 if backup is None else EPOCHS,
              verbose=0, callbacks=callbacks)
    # A replicated variable spans the devices of every process: read this process's copy.
    weights = {v.path: np.asarray(v.value.addressable_shards[0].data) for v in model.weights}
    update = max(float(np.max(np.abs(w - b))) for w, b in zip(weights.values(), before))
    np.savez(output, losses=np.array(losses.losses()), chief=np.array(is_chief()), update=np.array(update),
             devices=np.array(len(keras.distribution.list_devices())), **weights)


if __name__ == "__main__":
    main(*sys.argv[1:])
