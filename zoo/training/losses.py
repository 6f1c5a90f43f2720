"""Losses and metrics that ignore padding (label 0 by default)."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="zoo")
class MaskedSparseCrossentropy(keras.losses.Loss):
    """Sparse cross-entropy from logits that ignores `pad_id` labels, with
    optional label smoothing (Szegedy et al.; the Transformer uses 0.1).

    The loss is averaged over the non-padded labels of the batch.
    """

    def __init__(self, pad_id=0, label_smoothing=0.0, name="masked_sparse_crossentropy", **kwargs):
        super().__init__(name=name, reduction="sum", **kwargs)
        self.pad_id, self.label_smoothing = pad_id, label_smoothing

    def __call__(self, y_true, y_pred, sample_weight=None):
        # The loss masks `pad_id` labels itself and returns the mean. Keras'
        # own reduction would multiply that scalar by the Keras mask the
        # logits carry (from the decoder padding mask) and sum it, so it is
        # bypassed; the result is scaled for tf.distribute as Keras' means are
        # (each replica's mean / replicas; gradients are summed over replicas).
        return _scale_for_replicas(self.call(y_true, y_pred))

    def call(self, y_true, y_pred):
        y_true = ops.cast(y_true, "int32")
        logits = ops.cast(y_pred, "float32")
        log_probs = ops.log_softmax(logits, axis=-1)  # (B, T, V)
        nll = -ops.squeeze(ops.take_along_axis(log_probs, y_true[..., None], axis=-1), -1)
        if self.label_smoothing:
            smooth = -ops.mean(log_probs, axis=-1)
            nll = (1.0 - self.label_smoothing) * nll + self.label_smoothing * smooth
        mask = ops.cast(ops.not_equal(y_true, self.pad_id), "float32")
        return ops.sum(nll * mask) / ops.maximum(ops.sum(mask), 1.0)

    def get_config(self):
        return {**super().get_config(), "pad_id": self.pad_id, "label_smoothing": self.label_smoothing}


def _scale_for_replicas(loss):
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        if replicas > 1:
            loss = loss / replicas
    return loss


@keras.saving.register_keras_serializable(package="zoo")
class MaskedAccuracy(keras.metrics.Mean):
    """Token accuracy over non-padded labels."""

    def __init__(self, pad_id=0, name="accuracy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.pad_id = pad_id

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = ops.cast(y_true, "int32")
        correct = ops.cast(ops.equal(ops.cast(ops.argmax(y_pred, axis=-1), "int32"), y_true), "float32")
        mask = ops.cast(ops.not_equal(y_true, self.pad_id), "float32")
        return super().update_state(correct, sample_weight=mask)

    def get_config(self):
        return {**super().get_config(), "pad_id": self.pad_id}
