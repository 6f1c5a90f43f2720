"""tf.data pipelines for the three Transformer families, with static shapes.

Every batch has the same shape (a fixed batch size with
`drop_remainder=True`, and a fixed sequence length), so a compiled train step
is traced once and never again. Token ids are int32; padding masks are bool,
True on real tokens, as keras-hub's preprocessors make them. Inputs are
token ids that are already tokenized: packing and padding are done in NumPy
once, and only the random parts (window offsets, masking, shuffling) run in
the pipeline.

Shapes: B is the batch size, T the (target) sequence length, S the source
sequence length, P the number of masked positions.

Example:
```python
ids = chars.encode(text)  # (N,) int32
train = language_model_windows(ids[: n * 9 // 10], 12, 64, seed=0)
model.fit(train, steps_per_epoch=200, epochs=10)
```
"""

import math

import numpy as np
import tensorflow as tf

from zoo.data.packing import pack_sentences
from zoo.errors import DataError


def language_model_windows(ids, batch_size, sequence_length, seed=None):
    """Random windows of one token stream, nanoGPT's `get_batch` in tf.data.

    Each batch holds `batch_size` windows of `sequence_length + 1` tokens at
    uniformly random offsets, gathered from one constant tensor inside a `map`
    over an endless counter (no Python generator); the labels are the inputs
    shifted by one token. The offsets come from stateless random ops keyed by
    `(seed, step)`, so a seed gives the same batches every run.

    Args:
        ids: a 1-D int array, the whole tokenized text.
        batch_size: int. B.
        sequence_length: int. T, the block size.
        seed: int or None. None draws a fresh seed.

    Returns:
        An infinite `tf.data.Dataset` of `(token_ids, labels)`, both int32 of
        shape (B, T), with `labels[:, t] == token_ids[:, t + 1]` inside the
        window. Use it with `steps_per_epoch`.

    Raises:
        DataError: the text is shorter than one block of
            `sequence_length + 1` tokens.
    """
    ids = _stream(ids, sequence_length)
    seed = _seed(seed)
    data = tf.constant(ids, dtype=tf.int32)
    # Offsets in [0, N - T - 1]: the window's last label is token N - 1.
    num_offsets = len(ids) - sequence_length
    block = tf.range(sequence_length + 1, dtype=tf.int64)

    def window(step):
        offsets = tf.random.stateless_uniform(
            [batch_size],
            seed=tf.stack([tf.constant(seed, tf.int64), step]),
            minval=0,
            maxval=num_offsets,
            dtype=tf.int64,
        )
        tokens = tf.gather(data, offsets[:, None] + block[None, :])  # (B, T+1)
        return tokens[:, :-1], tokens[:, 1:]

    dataset = tf.data.Dataset.counter().map(
        window, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )
    return dataset.prefetch(tf.data.AUTOTUNE)


def language_model_eval_batches(ids, batch_size, sequence_length, num_batches, seed=0):
    """Fixed random windows for a deterministic validation loss estimate.

    nanoGPT's `estimate_loss` averages the loss over `eval_iters` random
    batches; fixing the windows once makes successive estimates comparable.

    Args:
        ids: a 1-D int array, the whole tokenized validation text.
        batch_size: int. B.
        sequence_length: int. T.
        num_batches: int. How many batches of windows.
        seed: int. The same seed gives the same windows.

    Returns:
        `(token_ids, labels)`: int32 arrays of shape (num_batches * B, T),
        for `model.evaluate(token_ids, labels, batch_size=B)`.

    Raises:
        DataError: the text is shorter than one block.
    """
    ids = _stream(ids, sequence_length)
    rng = np.random.default_rng(seed)
    offsets = rng.integers(0, len(ids) - sequence_length, size=num_batches * batch_size)
    tokens = ids[offsets[:, None] + np.arange(sequence_length + 1)]  # (N, T+1)
    return tokens[:, :-1], tokens[:, 1:]


def seq2seq_dataset(
    source_ids,
    target_ids,
    batch_size,
    source_length,
    target_length,
    start_id,
    end_id,
    pad_id=0,
    shuffle=True,
    seed=None,
):
    """Teacher-forcing batches for an encoder-decoder (translation) model.

    A target sentence `y` (without start or end tokens) becomes the decoder
    input `[start] + y` and the labels `y + [end]`, both cut to `target_length`
    and padded with `pad_id`: at every real position the decoder input is the
    label one step earlier, `decoder_token_ids == [start] + labels[:-1]`.
    Sources are cut to `source_length` and padded.

    Args:
        source_ids: a sequence of N int sequences (lists or array rows).
        target_ids: a sequence of N int sequences, without start or end.
        batch_size: int. B.
        source_length: int. S.
        target_length: int. T, counting the start (inputs) or end (labels).
        start_id: int. The decoder's start token.
        end_id: int. The end token the decoder learns to emit.
        pad_id: int. The padding token of both sides.
        shuffle: bool. Reshuffle the pairs every epoch.
        seed: int or None. The shuffling seed.

    Returns:
        A finite `tf.data.Dataset` of `(inputs, labels)`: `inputs` is a dict
        with `"encoder_token_ids"` (B, S) int32, `"encoder_padding_mask"`
        (B, S) bool, `"decoder_token_ids"` (B, T) int32 and
        `"decoder_padding_mask"` (B, T) bool; `labels` is (B, T) int32, padded
        with `pad_id` (train with `ignore_class=pad_id` or a masked loss).

    Raises:
        DataError: the two lists differ in length, a source is empty, or there
            are fewer than `batch_size` pairs.
    """
    if len(source_ids) != len(target_ids):
        raise DataError(
            f"seq2seq_dataset: expected as many targets as sources, got "
            f"{len(source_ids)} sources and {len(target_ids)} targets"
        )
    _check_batch(len(source_ids), batch_size, "seq2seq_dataset")
    for index, source in enumerate(source_ids):
        if len(source) == 0:
            raise DataError(
                f"seq2seq_dataset: source {index} is empty; expected at least "
                f"one token (an all-padding source has nothing to attend to)"
            )
    encoder_ids, encoder_lengths = _pack(source_ids, source_length, pad_id)
    decoder_ids, decoder_lengths = _pack(
        target_ids, target_length, pad_id, prefix=[start_id]
    )
    labels, _ = _pack(target_ids, target_length, pad_id, suffix=[end_id])
    inputs = {
        "encoder_token_ids": encoder_ids,
        "encoder_padding_mask": _mask(encoder_lengths, source_length),
        "decoder_token_ids": decoder_ids,
        "decoder_padding_mask": _mask(decoder_lengths, target_length),
    }
    return _batched(inputs, labels, batch_size, shuffle, seed)


def masked_lm_dataset(
    token_ids,
    batch_size,
    sequence_length,
    vocabulary_size,
    mask_token_id,
    cls_id,
    sep_id,
    pad_id=0,
    mask_selection_rate=0.15,
    mask_selection_length=None,
    shuffle=True,
    seed=None,
):
    """BERT's masked language model batches, with fresh masks every epoch.

    Each sequence is packed as `[CLS] ids [SEP]`, cut and padded to
    `sequence_length`; then `bert_masks` selects `mask_selection_rate` of
    the other tokens and replaces 80% of them by `[MASK]`, 10% by a random
    token and keeps 10% (BERT, Devlin et al. 2019, section 3.1). `[PAD]`,
    `[CLS]` and `[SEP]` are never selected. The rule and the output are
    those of keras-hub's `MaskedLMMaskGenerator` and
    `BertMaskedLMPreprocessor` (so the batches feed
    `keras_hub.models.BertMaskedLM` as well as our own models), but the masks
    are drawn from `seed` (keras-hub's generator takes none): the same seed
    gives the same batches, every run.

    With `shuffle=True` each pass over the data draws new masks (from
    `seed`); with `shuffle=False` every pass has the same masks, so that a
    validation loss compares across epochs.

    Args:
        token_ids: a sequence of N int sequences, without `[CLS]` / `[SEP]`.
        batch_size: int. B.
        sequence_length: int. T, counting `[CLS]` and `[SEP]`.
        vocabulary_size: int. Random replacements are drawn from
            [0, vocabulary_size).
        mask_token_id: int. The `[MASK]` token.
        cls_id: int. The `[CLS]` token.
        sep_id: int. The `[SEP]` token.
        pad_id: int. The `[PAD]` token.
        mask_selection_rate: float. The share of tokens selected.
        mask_selection_length: int or None. P, the most tokens selected in a
            sequence. None means `ceil(2 * mask_selection_rate * T)`, twice
            the mean, which trims almost never.
        shuffle: bool. Reshuffle the sequences and redraw the masks every
            epoch.
        seed: int or None. The seed of the shuffling and of the masks; None
            draws a fresh one.

    Returns:
        A finite `tf.data.Dataset` of `(inputs, mask_ids, mask_weights)`:
        `inputs` is a dict with `"token_ids"` (B, T) int32 (after masking),
        `"segment_ids"` (B, T) int32 (zeros), `"padding_mask"` (B, T) bool and
        `"mask_positions"` (B, P) int32; `mask_ids` (B, P) int32 are the
        original tokens at those positions, and `mask_weights` (B, P) float32
        are 1 for a real selection and 0 for padding.

    Raises:
        DataError: there are fewer than `batch_size` sequences.
    """
    _check_batch(len(token_ids), batch_size, "masked_lm_dataset")
    if mask_selection_length is None:
        mask_selection_length = math.ceil(2 * mask_selection_rate * sequence_length)
    mask_selection_length = max(1, min(mask_selection_length, sequence_length))
    inputs = _single_sentence_inputs(token_ids, sequence_length, pad_id, cls_id, sep_id)
    seed = _seed(seed)
    unselectable = tf.constant([pad_id, cls_id, sep_id], tf.int32)

    def mask(x, batch_seed):
        masked = bert_masks(
            x["token_ids"],
            tf.stack([tf.constant(seed, tf.int64), batch_seed]),
            vocabulary_size,
            mask_token_id,
            unselectable,
            mask_selection_rate,
            mask_selection_length,
        )
        x = {**x, "token_ids": masked["token_ids"], "mask_positions": masked["mask_positions"]}
        return x, masked["mask_ids"], masked["mask_weights"]

    dataset = _examples(inputs, len(inputs["token_ids"]), shuffle, seed)
    dataset = dataset.batch(batch_size, drop_remainder=True)
    # One stream of batch seeds per (seed, sequence length), so that the
    # buckets of one data set draw independent masks.
    stream = int(np.random.SeedSequence([seed, sequence_length]).generate_state(1)[0])
    batch_seeds = tf.data.Dataset.random(seed=stream, rerandomize_each_iteration=shuffle)
    dataset = tf.data.Dataset.zip(dataset, batch_seeds)
    dataset = dataset.map(mask, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.prefetch(tf.data.AUTOTUNE)


def bert_masks(
    token_ids,
    seed,
    vocabulary_size,
    mask_token_id,
    unselectable_ids,
    mask_selection_rate=0.15,
    mask_selection_length=20,
    mask_token_rate=0.8,
    random_token_rate=0.1,
):
    """BERT's masks for one batch, drawn from a stateless seed.

    The rule of TensorFlow Text's `mask_language_model` (keras-hub's
    `MaskedLMMaskGenerator`): in each row, `ceil(mask_selection_rate * n)` of
    the n selectable tokens (at most `mask_selection_length`) are chosen at
    random; each chosen token becomes `mask_token_id` with probability
    `mask_token_rate`, a random id with probability `random_token_rate`, and
    stays itself otherwise.

    Args:
        token_ids: (B, T) int32.
        seed: (2,) int64, a stateless seed: the same seed, the same masks.
        vocabulary_size: int. Random ids are drawn from [0, vocabulary_size).
        mask_token_id: int.
        unselectable_ids: (K,) int32, ids never chosen (padding, [CLS], [SEP]).
        mask_selection_rate: float.
        mask_selection_length: int. P, at most T.
        mask_token_rate: float.
        random_token_rate: float.

    Returns:
        A dict of `"token_ids"` (B, T) int32 after masking, `"mask_positions"`
        (B, P) int32 in increasing order, `"mask_ids"` (B, P) int32 (the
        original tokens there) and `"mask_weights"` (B, P) float32 (1 for a
        chosen token, 0 for the padding after the last); padding positions
        and ids are 0.
    """
    choose, replace, replacement = tf.unstack(tf.random.experimental.stateless_split(seed, 3))
    length = tf.shape(token_ids)[1]
    selectable = tf.reduce_all(token_ids[:, :, None] != unselectable_ids, axis=-1)
    count = tf.reduce_sum(tf.cast(selectable, tf.float32), axis=1, keepdims=True)
    wanted = tf.minimum(tf.math.ceil(count * mask_selection_rate), mask_selection_length)
    # A random order of the selectable positions; the first `wanted` are chosen.
    draw = tf.where(selectable, tf.random.stateless_uniform(tf.shape(token_ids), choose), 2.0)
    rank = tf.argsort(tf.argsort(draw, axis=1, stable=True), axis=1, stable=True)
    chosen = rank < tf.cast(wanted, tf.int32)
    where = tf.range(length)[None, :]
    positions = tf.sort(tf.where(chosen, where, length + where), axis=1)[:, :mask_selection_length]
    real = positions < length
    positions = tf.where(real, positions, 0)
    mask_ids = tf.where(real, tf.gather(token_ids, positions, batch_dims=1), 0)
    value = tf.random.stateless_uniform(tf.shape(token_ids), replace)
    random_ids = tf.random.stateless_uniform(
        tf.shape(token_ids), replacement, minval=0, maxval=vocabulary_size, dtype=tf.int32
    )
    masked = tf.where(chosen & (value < mask_token_rate), mask_token_id, token_ids)
    masked = tf.where(
        chosen & (value >= mask_token_rate) & (value < mask_token_rate + random_token_rate), random_ids, masked
    )
    shape = (token_ids.shape[0], mask_selection_length)
    return {
        "token_ids": tf.ensure_shape(masked, token_ids.shape),
        "mask_positions": tf.ensure_shape(positions, shape),
        "mask_ids": tf.ensure_shape(mask_ids, shape),
        "mask_weights": tf.ensure_shape(tf.cast(real, tf.float32), shape),
    }


def classification_dataset(
    token_ids,
    labels,
    batch_size,
    sequence_length,
    cls_id,
    sep_id,
    pad_id=0,
    shuffle=True,
    seed=None,
    pair_ids=None,
):
    """Sentence classification batches packed as `[CLS] ids [SEP]`, or
    sentence pairs as `[CLS] ids [SEP] pair ids [SEP]` (`pack_sentences`).

    Args:
        token_ids: a sequence of N int sequences, without `[CLS]` / `[SEP]`.
        labels: N ints.
        batch_size: int. B.
        sequence_length: int. T, counting `[CLS]` and `[SEP]`.
        cls_id: int. The `[CLS]` token, whose output a classifier reads.
        sep_id: int. The `[SEP]` token.
        pad_id: int. The `[PAD]` token.
        shuffle: bool. Reshuffle every epoch.
        seed: int or None. The shuffling seed.
        pair_ids: N second sentences' ids (segment 1), or None.

    Returns:
        A finite `tf.data.Dataset` of `(inputs, labels)`: `inputs` is a dict
        with `"token_ids"` (B, T) int32, `"segment_ids"` (B, T) int32 (zeros,
        ones over a second sentence) and `"padding_mask"` (B, T) bool;
        `labels` is (B,) int32.

    Raises:
        DataError: token_ids and labels differ in length, or there are fewer
            than `batch_size` examples.
    """
    labels = np.asarray(labels, dtype=np.int32).reshape(-1)
    if len(token_ids) != len(labels):
        raise DataError(
            f"classification_dataset: expected one label per sequence, got "
            f"{len(token_ids)} sequences and {len(labels)} labels"
        )
    _check_batch(len(labels), batch_size, "classification_dataset")
    if pair_ids is None:
        inputs = _single_sentence_inputs(token_ids, sequence_length, pad_id, cls_id, sep_id)
    else:
        inputs = pack_sentences(token_ids, pair_ids, sequence_length, cls_id, sep_id, pad_id)
        inputs["padding_mask"] = inputs["padding_mask"].astype(bool)
    return _batched(inputs, labels, batch_size, shuffle, seed)


def check_token_ids(ids, vocabulary_size, where):
    """Raises a DataError if any token id is outside [0, vocabulary_size).

    An out-of-range id does not fail loudly everywhere: on some devices an
    embedding lookup returns zeros for it. Call this once after tokenizing.

    Args:
        ids: an int array of any shape, or a sequence of int sequences.
        vocabulary_size: int.
        where: str. Named in the error, e.g. `"multi30k train.de"`.

    Raises:
        DataError: naming `where`, the first bad id and its index.
    """
    if isinstance(ids, np.ndarray) or len(ids) == 0 or np.isscalar(ids[0]):
        ids = np.asarray(ids)
        flat, lengths = ids.reshape(-1), None
    else:  # ragged: a sequence of sequences
        rows = [np.asarray(row).reshape(-1) for row in ids]
        flat, lengths = np.concatenate(rows), np.array([len(r) for r in rows])
    bad = np.flatnonzero((flat < 0) | (flat >= vocabulary_size))
    if not bad.size:
        return
    first = int(bad[0])
    if lengths is not None:
        row = int(np.searchsorted(np.cumsum(lengths), first, side="right"))
        place = f"sequence {row}, index {first - int(lengths[:row].sum())}"
    elif ids.ndim == 1:
        place = f"index {first}"
    else:
        place = f"index {tuple(int(i) for i in np.unravel_index(first, ids.shape))}"
    raise DataError(
        f"{where}: expected token ids in [0, {vocabulary_size}), got "
        f"{int(flat[first])} at {place} ({bad.size} ids out of range)"
    )


def _stream(ids, sequence_length):
    ids = np.asarray(ids)
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
        raise DataError(
            f"expected a 1-D array of int token ids, got shape {ids.shape} "
            f"of {ids.dtype}"
        )
    if len(ids) < sequence_length + 1:
        raise DataError(
            f"the text has {len(ids)} tokens; expected at least one block of "
            f"sequence_length + 1 = {sequence_length + 1}"
        )
    return ids.astype(np.int32)


def _single_sentence_inputs(token_ids, sequence_length, pad_id, cls_id, sep_id):
    """BERT's inputs for single sentences: [CLS] ids [SEP], cut and padded
    to `sequence_length`, segment 0 throughout."""
    packed, lengths = _pack(
        [list(ids)[: sequence_length - 2] for ids in token_ids],
        sequence_length,
        pad_id,
        prefix=[cls_id],
        suffix=[sep_id],
    )
    return {
        "token_ids": packed,
        "segment_ids": np.zeros_like(packed),
        "padding_mask": _mask(lengths, sequence_length),
    }


def _pack(sequences, length, pad_id, prefix=(), suffix=()):
    """Cuts `prefix + sequence + suffix` to `length` and pads with `pad_id`.

    Returns:
        `(ids, lengths)`: int32 (N, length) and the unpadded lengths (N,).
    """
    ids = np.full((len(sequences), length), pad_id, dtype=np.int32)
    lengths = np.zeros(len(sequences), dtype=np.int32)
    for row, sequence in enumerate(sequences):
        tokens = (list(prefix) + list(sequence) + list(suffix))[:length]
        ids[row, : len(tokens)] = tokens
        lengths[row] = len(tokens)
    return ids, lengths


def _mask(lengths, length):
    """(N, length) bool, True at the first `lengths[i]` positions of row i."""
    return np.arange(length)[None, :] < lengths[:, None]


def _examples(tensors, count, shuffle, seed):
    dataset = tf.data.Dataset.from_tensor_slices(tensors)
    if shuffle:
        dataset = dataset.shuffle(count, seed=seed, reshuffle_each_iteration=True)
    return dataset


def _batched(inputs, labels, batch_size, shuffle, seed):
    dataset = _examples((inputs, labels), len(labels), shuffle, seed)
    dataset = dataset.batch(batch_size, drop_remainder=True)
    return dataset.prefetch(tf.data.AUTOTUNE)


def _check_batch(count, batch_size, where):
    if count < batch_size:
        raise DataError(
            f"{where}: got {count} examples, fewer than one batch of "
            f"{batch_size}; expected at least batch_size examples (the last "
            f"partial batch is dropped to keep shapes static)"
        )


def _seed(seed):
    if seed is None:
        return int(np.random.default_rng().integers(2**31))
    return int(seed)
