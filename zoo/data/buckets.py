"""Batches grouped by length: short sentences are not padded to the longest.

The tf.data pipelines of `zoo.data` give every batch one static shape. A
recipe groups its examples into a few length buckets, builds one pipeline per
bucket (each padded to its bucket's bound), and interleaves them: a compiled
train step is traced once per bucket, and a batch of 10-token phrases costs
a tenth of one padded to 100.

`bucketed_batches` does all three in one call.

Example:
```python
def pipeline(rows, bound):  # one bucket's examples, padded to `bound`
    return classification_dataset([ids[i] for i in rows], labels[rows], 128, bound, cls_id, sep_id)

train, steps = bucketed_batches(pipeline, lengths, (16, 32, 64), batch_size=128, seed=0)
```
"""

import numpy as np


def bucketed_batches(pipeline, lengths, bounds, batch_size, max_length=None, shuffle=True, seed=None):
    """Batches grouped by length: one pipeline per length bucket,
    interleaved into one stream.

    Args:
        pipeline: a function `(indices, bound) -> tf.data.Dataset` that
            batches the examples at `indices` (a list of ints) padded to
            `bound` tokens, with `batch_size` examples a batch (dropping
            the last partial one).
        lengths: N ints, each example's length in tokens (counting any
            start, end or [CLS]/[SEP] tokens the pipeline adds).
        bounds: increasing ints, the batch lengths.
        batch_size: int, examples a batch.
        max_length: int or None; when given, the bounds above it are
            dropped and `max_length` becomes the last bound (longer
            examples are cut by the pipeline).
        shuffle: bool; True interleaves the buckets at random (training),
            False chains them in order (validation).
        seed: int or None, for the random interleaving.

    Returns:
        `(dataset, steps)`: a finite dataset whose bool tensors are int32
        (see `int32_masks`), and its number of batches in one pass.

    Example:
    ```python
    import numpy as np
    import tensorflow as tf

    lengths = [3, 5, 12, 14, 4, 13]
    def pipeline(rows, bound):
        x = np.zeros((len(rows), bound), "int32")
        return tf.data.Dataset.from_tensor_slices(x).batch(2, drop_remainder=True)
    dataset, steps = bucketed_batches(pipeline, lengths, (8, 16), batch_size=2, shuffle=False)
    [b.shape[1] for b in dataset]  # [8, 16, 16]: steps == 3
    ```
    """
    if max_length is not None:
        bounds = tuple(b for b in sorted(bounds) if b < max_length) + (int(max_length),)
    groups = length_buckets(lengths, bounds, batch_size)
    datasets = [pipeline(rows, bound) for bound, rows in groups]
    return interleave(datasets, [len(rows) // batch_size for _, rows in groups], seed, shuffle)


def length_buckets(lengths, bounds, batch_size):
    """Groups example indices by the shortest bound that holds them.

    Args:
        lengths: N ints, each example's length in tokens (counting any start,
            end or [CLS]/[SEP] tokens the pipeline adds).
        bounds: increasing ints; examples longer than the last bound go to
            the last bucket (and are cut by the pipeline).
        batch_size: a bucket with fewer examples than one batch joins the
            next longer one; a last bucket under one batch is left out
            unless it is the only one.

    Returns:
        A list of `(bound, indices)`, each `indices` a list of ints.
    """
    bounds = sorted(bounds)
    groups = [[] for _ in bounds]
    for index, length in enumerate(lengths):
        groups[min(int(np.searchsorted(bounds, length)), len(bounds) - 1)].append(index)
    kept = []
    for i, (bound, rows) in enumerate(zip(bounds, groups)):
        if len(rows) < batch_size and i < len(bounds) - 1:
            groups[i + 1] = rows + groups[i + 1]
        elif len(rows) >= batch_size or (rows and not kept):
            kept.append((bound, rows))
    return kept


def interleave(datasets, counts, seed=None, shuffle=True):
    """One stream of the batches of several finite datasets.

    Args:
        datasets: tf.data datasets with the same structure.
        counts: the number of batches in one pass of each.
        seed: int or None, for the random interleaving.
        shuffle: False chains them in order (for validation).

    Returns:
        `(dataset, steps)`: a finite dataset, and its number of batches.
    """
    import tensorflow as tf

    steps = int(sum(counts))
    datasets = [int32_masks(d) for d in datasets]
    if len(datasets) == 1:
        return datasets[0], steps
    if not shuffle:
        dataset = datasets[0]
        for other in datasets[1:]:
            dataset = dataset.concatenate(other)
        return dataset, steps
    weights = (np.asarray(counts, dtype="float64") / max(steps, 1)).tolist()
    dataset = tf.data.Dataset.sample_from_datasets(datasets, weights, seed=seed, stop_on_empty_dataset=False)
    return dataset.prefetch(tf.data.AUTOTUNE), steps


def int32_masks(dataset):
    """The dataset with its bool tensors (the padding masks) as int32 0/1.

    Keras under a tf.distribute strategy cannot split bool inputs across
    replicas (TensorFlow's AddN has no bool kernel); the zoo models' mask
    inputs are int32 anyway, so this changes nothing on one device.
    """
    import tensorflow as tf

    def cast(*parts):
        parts = tf.nest.map_structure(lambda t: tf.cast(t, tf.int32) if t.dtype == tf.bool else t, parts)
        return parts if len(parts) > 1 else parts[0]

    return dataset.map(cast, num_parallel_calls=tf.data.AUTOTUNE)


def divisor_batch_size(count, batch_size):
    """The largest batch size <= `batch_size` that divides `count`, so that a
    pipeline that drops the last partial batch still sees every example
    (872 SST-2 dev sentences, batch 64 -> 8)."""
    return max(d for d in range(1, min(batch_size, count) + 1) if count % d == 0)
