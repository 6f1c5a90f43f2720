"""Losses and metrics that ignore padding (label 0 by default)."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="zoo")
class MaskedSparseCrossentropy(keras.losses.Loss):
    """Sparse cross-entropy from logits that ignores `pad_id` labels, with
    optional label smoothing (Szegedy et al.; the Transformer uses 0.1).

    A `sample_weight` of the labels' shape (B, T) weighs each label on top
    of that: a 0/1 loss mask (supervised fine-tuning's, which counts only the
    assistant's tokens) makes the loss the mean over the labels it marks.
    `pad_id=None` masks no id, for targets where every id is a real token.

    The loss is averaged over the non-padded labels of the whole batch: under
    a `tf.distribute` strategy each replica divides its own sum by the number
    of real labels on all replicas, so the summed gradients are those of the
    global masked mean (not of the mean of the replicas' means, which weighs
    a replica's labels more when it holds fewer of them).
    """

    def __init__(self, pad_id=0, label_smoothing=0.0, name="masked_sparse_crossentropy", **kwargs):
        kwargs.pop("reduction", None)  # always "sum" (see __call__); a saved config records it
        super().__init__(name=name, reduction="sum", **kwargs)
        self.pad_id, self.label_smoothing = pad_id, label_smoothing

    def __call__(self, y_true, y_pred, sample_weight=None):
        # The loss masks `pad_id` labels itself and returns the mean. Keras'
        # own reduction would multiply that scalar by the Keras mask the
        # logits carry (from the decoder padding mask) and sum it, so it is
        # bypassed. Under tf.distribute, gradients are summed over replicas:
        # each replica returns its sum over the real labels of all replicas.
        total, count = self._sum_and_count(y_true, y_pred, sample_weight)
        return total / ops.maximum(_count_over_replicas(count), 1.0)

    def call(self, y_true, y_pred):
        total, count = self._sum_and_count(y_true, y_pred)
        return total / ops.maximum(count, 1.0)

    def _sum_and_count(self, y_true, y_pred, sample_weight=None):
        """(sum of the weighted per-label losses over the real labels, the sum of their weights)."""
        # Under mixed precision the logits stay in their compute dtype
        # (bfloat16); only (B, T) values are float32. A float32 copy of the
        # (B, T, V) logits - 3.3 GB per step for GPT-2 at 16 x 1024 - is never
        # made: the casts below feed reductions, which XLA fuses with them.
        #   log p(y) = logit_y - logsumexp(logits)
        #   mean_v log p(v) = mean(logits) - logsumexp(logits)
        y_true = ops.cast(y_true, "int32")
        logsumexp = _logsumexp_float32(y_pred)  # (B, T)
        true_logit = ops.cast(ops.squeeze(ops.take_along_axis(y_pred, y_true[..., None], axis=-1), -1), "float32")
        nll = logsumexp - true_logit  # (B, T)
        if self.label_smoothing:
            smooth = logsumexp - ops.mean(ops.cast(y_pred, "float32"), axis=-1)
            nll = (1.0 - self.label_smoothing) * nll + self.label_smoothing * smooth
        mask = ops.ones_like(nll) if self.pad_id is None else ops.cast(ops.not_equal(y_true, self.pad_id), "float32")
        if sample_weight is not None:
            mask = mask * ops.cast(ops.reshape(sample_weight, ops.shape(nll)), "float32")
        return ops.sum(nll * mask), ops.sum(mask)

    def get_config(self):
        return {**super().get_config(), "pad_id": self.pad_id, "label_smoothing": self.label_smoothing}


def _logsumexp_float32(logits):
    """log sum_v exp(logits[..., v]) in float32 from logits of any float
    dtype: (..., V) -> (...). The maximum is taken in the logits' own dtype
    (exact); the exponentials and their sum are float32."""
    peak = ops.stop_gradient(ops.max(logits, axis=-1, keepdims=True))  # (..., 1)
    shifted = ops.cast(logits, "float32") - ops.cast(peak, "float32")
    return ops.log(ops.sum(ops.exp(shifted), axis=-1)) + ops.cast(peak[..., 0], "float32")


def _count_over_replicas(count):
    """`count` summed over the replicas of a tf.distribute step (itself
    outside one, and on other backends, whose distributed arrays are global)."""
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        context = tf.distribute.get_replica_context()
        if context is not None and context.num_replicas_in_sync > 1:
            count = context.all_reduce(tf.distribute.ReduceOp.SUM, count)
    return count


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
