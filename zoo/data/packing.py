"""BERT's packing of sentences and sentence pairs into model inputs, in
NumPy: what training batches and `zoo.classify` share."""

import numpy as np


def pack_sentences(token_ids, pair_ids, sequence_length, cls_id, sep_id, pad_id=0):
    """BERT's inputs for sentences or sentence pairs (Devlin et al. 2019,
    section 3): `[CLS] a [SEP]`, or `[CLS] a [SEP] b [SEP]` with segment 0
    up to the first `[SEP]` and 1 after it. A pair too long for
    `sequence_length` loses tokens from the end of its longer sentence
    first (transformers' "longest_first").

    Args:
        token_ids: N int sequences, without special tokens.
        pair_ids: N second int sequences, or None for single sentences.
        sequence_length: T, special tokens included.
        cls_id, sep_id, pad_id: the special tokens' ids.

    Returns:
        {"token_ids", "segment_ids", "padding_mask"}: int32 (N, T) arrays.
    """
    rows = len(token_ids)
    packed = np.full((rows, sequence_length), pad_id, dtype=np.int32)
    segments = np.zeros((rows, sequence_length), dtype=np.int32)
    lengths = np.zeros(rows, dtype=np.int32)
    for row in range(rows):
        first, second = list(token_ids[row]), None if pair_ids is None else list(pair_ids[row])
        if second is None:
            tokens, segment = [cls_id] + first[: sequence_length - 2] + [sep_id], []
        else:
            room = sequence_length - 3
            while len(first) + len(second) > room:
                (first if len(first) > len(second) else second).pop()
            tokens = [cls_id] + first + [sep_id] + second + [sep_id]
            segment = [len(first) + 2, len(tokens)]
        tokens = tokens[:sequence_length]
        packed[row, : len(tokens)], lengths[row] = tokens, len(tokens)
        if segment:
            segments[row, segment[0] : segment[1]] = 1
    padding_mask = (np.arange(sequence_length)[None, :] < lengths[:, None]).astype(np.int32)
    return {"token_ids": packed, "segment_ids": segments, "padding_mask": padding_mask}
