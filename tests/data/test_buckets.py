"""Length buckets: every example lands in the shortest bucket that holds it,
small buckets merge upwards, and the interleaved stream holds each bucket's
batches with that bucket's static shape."""

import numpy as np
import tensorflow as tf

from zoo.data import bucketed_batches, divisor_batch_size, interleave, length_buckets


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


def test_bucketed_batches_pads_each_example_to_its_bucket_and_sees_each_once():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 40, size=64).tolist()
    sentences = [list(range(1, n + 1)) for n in lengths]  # example i holds 1..length

    def pipeline(rows, bound):
        padded = np.zeros((len(rows), bound), "int32")
        for row, i in enumerate(rows):
            padded[row, : min(lengths[i], bound)] = sentences[i][:bound]
        mask = padded != 0
        data = ({"token_ids": padded, "padding_mask": mask}, np.asarray(rows, "int32"))
        return tf.data.Dataset.from_tensor_slices(data).batch(4, drop_remainder=True)

    # max_length 24 drops the bound 32 and makes 24 the last one.
    stream, steps = bucketed_batches(pipeline, lengths, (8, 16, 32), batch_size=4, max_length=24, seed=1)
    batches = list(stream.as_numpy_iterator())
    assert len(batches) == steps
    seen = []
    for x, rows in batches:
        bound = x["token_ids"].shape[1]
        assert bound in (8, 16, 24)
        assert x["padding_mask"].dtype == np.int32
        for row, i in enumerate(rows):
            # the shortest bound that holds it (or the last, cut), or a larger one when its bucket merged up
            assert min(lengths[i], 24) <= bound
            assert x["padding_mask"][row].sum() == min(lengths[i], bound)
        seen += rows.tolist()
    assert len(seen) == len(set(seen))
    groups = length_buckets(lengths, (8, 16, 24), 4)
    assert steps == sum(len(rows) // 4 for _, rows in groups)
    # Validation order: the buckets one after another, shortest first.
    ordered, _ = bucketed_batches(pipeline, lengths, (8, 16, 32), batch_size=4, max_length=24, shuffle=False)
    shapes = [x["token_ids"].shape[1] for x, _ in ordered.as_numpy_iterator()]
    assert shapes == sorted(shapes) and len(shapes) == steps
