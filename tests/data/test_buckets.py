"""Length buckets: every example lands in the shortest bucket that holds it,
small buckets merge upwards, and the interleaved stream holds each bucket's
batches with that bucket's static shape."""

import numpy as np
import tensorflow as tf

from zoo.data import divisor_batch_size, interleave, length_buckets


def test_examples_go_to_the_shortest_bound_that_holds_them():
    lengths = [3, 16, 17, 30, 32, 33, 100, 5, 9, 20]
    groups = dict(length_buckets(lengths, (16, 32, 64), batch_size=1))
    assert groups[16] == [0, 1, 7, 8]
    assert groups[32] == [2, 3, 4, 9]
    assert groups[64] == [5, 6]  # 100 is longer than every bound: the last bucket (the pipeline cuts it)


def test_a_bucket_smaller_than_a_batch_joins_the_next_longer_one():
    lengths = [4] * 3 + [20] * 8 + [40] * 2
    groups = length_buckets(lengths, (8, 24, 48), batch_size=4)
    # 3 short ones move up to 24; the 2 longest make less than a batch and are left out.
    assert [(bound, len(rows)) for bound, rows in groups] == [(24, 11)]
    assert sorted(groups[0][1]) == list(range(11))
    # ... unless they would be the only bucket.
    assert length_buckets([40, 41], (8, 48), batch_size=4) == [(48, [0, 1])]


def _bucket(bound, count, start):
    ids = np.arange(start, start + count * 2, dtype="int32").reshape(count * 2, 1).repeat(bound, axis=1)
    mask = np.ones_like(ids, dtype=bool)
    return tf.data.Dataset.from_tensor_slices(({"token_ids": ids, "padding_mask": mask}, ids[:, 0])).batch(2)


def test_interleave_yields_every_batch_once_with_its_bucket_shape():
    datasets = [_bucket(8, 3, 0), _bucket(16, 5, 100)]
    stream, steps = interleave(datasets, [3, 5], seed=0)
    assert steps == 8
    batches = list(stream.as_numpy_iterator())
    assert len(batches) == 8
    assert sorted(x["token_ids"].shape[1] for x, _ in batches) == [8] * 3 + [16] * 5
    assert all(x["padding_mask"].dtype == np.int32 for x, _ in batches)  # bool masks -> int32
    labels = sorted(int(v) for _, y in batches for v in y)
    assert labels == list(range(0, 6)) + list(range(100, 110))
    ordered, _ = interleave(datasets, [3, 5], shuffle=False)
    assert [x["token_ids"].shape[1] for x, _ in ordered.as_numpy_iterator()] == [8] * 3 + [16] * 5


def test_divisor_batch_size_keeps_every_example():
    assert divisor_batch_size(872, 64) == 8
    assert divisor_batch_size(1000, 64) == 50
    assert divisor_batch_size(7, 64) == 7
