"""tf.data pipelines: static shapes and the invariants each task relies on."""

import numpy as np
import pytest
import tensorflow as tf

from zoo.data import (
    DataError,
    check_token_ids,
    classification_dataset,
    language_model_eval_batches,
    language_model_windows,
    masked_lm_dataset,
    seq2seq_dataset,
)


def take(dataset, count):
    """The first `count` elements as NumPy structures."""
    return [tf.nest.map_structure(lambda t: t.numpy(), e) for e in dataset.take(count)]


def assert_static(dataset):
    for spec in tf.nest.flatten(dataset.element_spec):
        assert spec.shape.is_fully_defined(), dataset.element_spec


# Language model windows


def test_language_model_windows_shapes_and_next_token_labels():
    text = np.arange(500, dtype=np.int32) * 3 + 7  # every token unique
    dataset = language_model_windows(text, batch_size=4, sequence_length=16, seed=0)
    assert_static(dataset)
    assert dataset.element_spec[0].shape == (4, 16)
    assert dataset.element_spec[0].dtype == tf.int32
    assert dataset.cardinality() == tf.data.INFINITE_CARDINALITY
    for x, y in take(dataset, 5):
        np.testing.assert_array_equal(y[:, :-1], x[:, 1:])
        for row_x, row_y in zip(x, y):
            start = (row_x[0] - 7) // 3  # the window comes from the text
            np.testing.assert_array_equal(row_x, text[start : start + 16])
            np.testing.assert_array_equal(row_y, text[start + 1 : start + 17])


def test_language_model_windows_cover_the_whole_text():
    # With 3 possible offsets, both ends of the text are reached.
    text = np.arange(10, dtype=np.int32)
    dataset = language_model_windows(text, batch_size=8, sequence_length=7, seed=1)
    starts = np.concatenate([x[:, 0] for x, _ in take(dataset, 10)])
    assert set(starts.tolist()) == {0, 1, 2}


def test_language_model_windows_seeded():
    text = np.arange(1000, dtype=np.int32)
    first = take(language_model_windows(text, 4, 8, seed=3), 3)
    again = take(language_model_windows(text, 4, 8, seed=3), 3)
    other = take(language_model_windows(text, 4, 8, seed=4), 3)
    np.testing.assert_array_equal(first[2][0], again[2][0])
    assert not np.array_equal(first[2][0], other[2][0])


def test_language_model_windows_text_shorter_than_a_block():
    with pytest.raises(DataError, match="8 tokens.*sequence_length \\+ 1 = 9"):
        language_model_windows(np.arange(8), batch_size=2, sequence_length=8)


def test_language_model_eval_batches_fixed():
    text = np.arange(300, dtype=np.int32)
    x, y = language_model_eval_batches(text, 4, 10, num_batches=3, seed=0)
    assert x.shape == y.shape == (12, 10) and x.dtype == np.int32
    np.testing.assert_array_equal(y, x + 1)
    np.testing.assert_array_equal(x[:, 1:] - x[:, :-1], 1)
    x_again, _ = language_model_eval_batches(text, 4, 10, num_batches=3, seed=0)
    np.testing.assert_array_equal(x, x_again)


# Sequence to sequence


def test_seq2seq_teacher_forcing():
    rng = np.random.default_rng(0)
    start, end, source_length, target_length = 1, 2, 6, 5
    sources = [rng.integers(3, 50, rng.integers(1, 9)).tolist() for _ in range(24)]
    targets = [rng.integers(3, 50, rng.integers(0, 7)).tolist() for _ in range(24)]
    dataset = seq2seq_dataset(
        sources, targets, 8, source_length, target_length, start, end, shuffle=False
    )
    assert_static(dataset)
    (inputs, labels), *_ = take(dataset, 3)
    assert labels.shape == (8, target_length) and labels.dtype == np.int32
    assert inputs["encoder_padding_mask"].dtype == bool
    decoder, mask = inputs["decoder_token_ids"], inputs["decoder_padding_mask"]
    np.testing.assert_array_equal(decoder[:, 0], start)
    # decoder input == [start] + labels[:-1] on every real position.
    shifted = np.concatenate([np.full((8, 1), start), labels[:, :-1]], axis=1)
    np.testing.assert_array_equal(decoder[mask], shifted[mask])
    np.testing.assert_array_equal(labels[~mask], 0)
    np.testing.assert_array_equal(decoder[~mask], 0)
    for i in range(8):
        target = targets[i]
        expected = (target + [end])[:target_length]
        np.testing.assert_array_equal(labels[i, : len(expected)], expected)
        source = sources[i][:source_length]
        np.testing.assert_array_equal(inputs["encoder_token_ids"][i, : len(source)], source)
        assert inputs["encoder_padding_mask"][i].sum() == len(source)


def test_seq2seq_drops_the_partial_batch_and_shuffles_with_seed():
    sources = [[i + 3] for i in range(10)]
    dataset = seq2seq_dataset(sources, sources, 4, 2, 3, 1, 2, seed=0)
    batches = take(dataset, 10)
    assert len(batches) == 2  # 10 pairs: two full batches of 4
    again = take(seq2seq_dataset(sources, sources, 4, 2, 3, 1, 2, seed=0), 10)
    np.testing.assert_array_equal(batches[0][1], again[0][1])

    def order(batches):  # the first label of each pair is its source id
        return [int(t) for _, labels in batches for t in labels[:, 0]]

    assert order(batches) != list(range(3, 11)), "the pairs came in file order"
    assert order(batches) != order(take(seq2seq_dataset(sources, sources, 4, 2, 3, 1, 2, seed=1), 10))
    unshuffled = take(seq2seq_dataset(sources, sources, 4, 2, 3, 1, 2, shuffle=False), 10)
    assert order(unshuffled) == list(range(3, 11))


def test_seq2seq_errors():
    with pytest.raises(DataError, match="2 sources and 1 targets"):
        seq2seq_dataset([[3], [4]], [[3]], 1, 2, 2, 1, 2)
    with pytest.raises(DataError, match="source 1 is empty"):
        seq2seq_dataset([[3], []], [[3], [4]], 1, 2, 2, 1, 2)
    with pytest.raises(DataError, match="fewer than one batch of 4"):
        seq2seq_dataset([[3], [4]], [[3], [4]], 4, 2, 2, 1, 2)


# Masked language model

PAD, CLS, SEP, MASK, VOCABULARY = 0, 1, 2, 3, 100


@pytest.fixture(scope="module")
def masked_batch():
    rng = np.random.default_rng(0)
    lengths = np.r_[np.full(48, 62), rng.integers(1, 40, 16)]  # some padded
    sequences = [rng.integers(4, VOCABULARY, n).tolist() for n in lengths]
    dataset = masked_lm_dataset(
        sequences, 64, 64, VOCABULARY, MASK, CLS, SEP, shuffle=False, seed=0
    )
    assert_static(dataset)
    (batch,) = take(dataset, 1)
    return sequences, batch


def test_masked_lm_structure_mirrors_keras_hub(masked_batch):
    _, (x, mask_ids, mask_weights) = masked_batch
    assert set(x) == {"token_ids", "segment_ids", "padding_mask", "mask_positions"}
    positions = 20  # ceil(2 * 0.15 * 64)
    assert x["token_ids"].shape == (64, 64) and x["token_ids"].dtype == np.int32
    assert x["padding_mask"].dtype == bool
    np.testing.assert_array_equal(x["segment_ids"], 0)
    assert x["mask_positions"].shape == mask_ids.shape == mask_weights.shape == (64, positions)
    assert mask_ids.dtype == np.int32 and mask_weights.dtype == np.float32


def test_masked_lm_selects_about_15_percent_never_special(masked_batch):
    sequences, (x, mask_ids, mask_weights) = masked_batch
    selected, replaced_by_mask, kept = 0, 0, 0
    for i, sequence in enumerate(sequences):
        original = np.array([CLS] + sequence[:62] + [SEP])
        n = len(original)
        np.testing.assert_array_equal(x["padding_mask"][i], np.arange(64) < n)
        real = mask_weights[i] == 1
        positions = x["mask_positions"][i][real]
        # Never [CLS] (0), [SEP] (n - 1) or padding (>= n).
        assert np.all((positions > 0) & (positions < n - 1))
        np.testing.assert_array_equal(mask_ids[i][real], original[positions])
        # Tokens that were not selected are unchanged.
        unselected = np.setdiff1d(np.arange(n), positions)
        np.testing.assert_array_equal(x["token_ids"][i][unselected], original[unselected])
        np.testing.assert_array_equal(x["token_ids"][i][n:], PAD)
        # ceil(15%) of the selectable tokens, at most 20, in increasing order.
        assert real.sum() == min(np.ceil(0.15 * (n - 2)), 20)
        assert np.all(np.diff(positions) > 0) and not real[real.sum():].any()
        np.testing.assert_array_equal(x["mask_positions"][i][~real], 0)
        np.testing.assert_array_equal(mask_ids[i][~real], 0)
        selected += real.sum()
        replaced_by_mask += (x["token_ids"][i][positions] == MASK).sum()
        kept += (x["token_ids"][i][positions] == original[positions]).sum()
    # 80% [MASK], 10% a random id, 10% kept (plus the random ids that drew
    # the original) of ~520 selections: standard deviations of about 2%.
    assert 0.72 < replaced_by_mask / selected < 0.88
    assert 0.04 < kept / selected < 0.18


def masks(dataset, passes=1):
    return [[np.concatenate([x["token_ids"], x["mask_positions"]], 1) for x, _, _ in take(dataset, 4)]
            for _ in range(passes)]


def test_masked_lm_masks_come_from_the_seed_and_change_every_epoch_only_when_shuffled():
    rng = np.random.default_rng(1)
    sequences = [rng.integers(4, VOCABULARY, rng.integers(5, 30)).tolist() for _ in range(64)]

    def build(seed, shuffle=True):
        return masked_lm_dataset(sequences, 16, 32, VOCABULARY, MASK, CLS, SEP, shuffle=shuffle, seed=seed)

    first, second = masks(build(7), passes=2)
    again = masks(build(7), passes=2)
    np.testing.assert_array_equal(np.stack(first + second), np.stack(again[0] + again[1]))
    assert not np.array_equal(np.stack(first), np.stack(second))  # a new epoch, new order and masks
    assert not np.array_equal(np.stack(first), np.stack(masks(build(8))[0]))
    fixed = masks(build(7, shuffle=False), passes=2)
    np.testing.assert_array_equal(np.stack(fixed[0]), np.stack(fixed[1]))
    assert not np.array_equal(np.stack(fixed[0]), np.stack(masks(build(8, shuffle=False))[0]))


# Classification


def test_classification_dataset_packs_cls_and_sep():
    sequences = [[5, 6, 7], [8], [9, 10, 11, 12, 13, 14, 15]]
    dataset = classification_dataset(
        sequences, [1, 0, 1], 3, 6, cls_id=1, sep_id=2, shuffle=False
    )
    assert_static(dataset)
    ((x, labels),) = take(dataset, 1)
    np.testing.assert_array_equal(
        x["token_ids"],
        [[1, 5, 6, 7, 2, 0], [1, 8, 2, 0, 0, 0], [1, 9, 10, 11, 12, 2]],
    )
    np.testing.assert_array_equal(x["padding_mask"], x["token_ids"] != 0)
    np.testing.assert_array_equal(x["segment_ids"], 0)
    assert labels.dtype == np.int32
    np.testing.assert_array_equal(labels, [1, 0, 1])


def test_classification_dataset_label_count_mismatch():
    with pytest.raises(DataError, match="2 sequences and 1 labels"):
        classification_dataset([[3], [4]], [1], 1, 4, 1, 2)


# check_token_ids


def test_check_token_ids():
    check_token_ids(np.array([[0, 5], [9, 1]]), 10, "ok")
    with pytest.raises(DataError, match=r"train\.en: .*\[0, 10\), got 10 at index \(1, 0\)"):
        check_token_ids(np.array([[0, 5], [10, 1]]), 10, "train.en")
    with pytest.raises(DataError, match="got -1 at sequence 2, index 1 \\(2 ids"):
        check_token_ids([[1], [2, 3], [4, -1, 99]], 10, "ragged")
    with pytest.raises(DataError, match="got 12 at index 1"):
        check_token_ids([3, 12], 10, "flat list")
