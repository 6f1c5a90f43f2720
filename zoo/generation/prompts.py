"""Prompts in, token lists out: the host-side (NumPy) ends of generation.

Shape letters: B batch, P longest prompt, L = P + new tokens.
"""

import numpy as np


def as_batch(prompt, padding_mask=None, name="prompt"):
    """A batch of token-id sequences -> a list of B 1-D int arrays.

    Accepts a list of sequences of different lengths, or a (B, T) array
    with an optional (B, T) `padding_mask` (True or 1 at tokens; padding
    may sit on either side: only the masked-in tokens are kept, in order).
    """
    if prompt is None:
        raise ValueError(f"`{name}` is required: a batch of token-id sequences.")
    if hasattr(prompt, "numpy") or (hasattr(prompt, "shape") and hasattr(prompt, "dtype")):
        prompt = np.asarray(prompt)
    if isinstance(prompt, np.ndarray):
        if prompt.ndim != 2:
            raise ValueError(
                f"`{name}` as an array must be (batch, length); got shape {prompt.shape}. "
                f"Wrap a single sequence as [sequence]."
            )
        rows = list(prompt)
        if padding_mask is not None:
            mask = np.asarray(padding_mask)
            if mask.shape != prompt.shape:
                raise ValueError(
                    f"`{name}` padding mask of shape {mask.shape} must match {name} of shape {prompt.shape}."
                )
            rows = [row[m.astype(bool)] for row, m in zip(rows, mask)]
    else:
        if padding_mask is not None:
            raise ValueError(
                f"A padding mask goes with a padded (batch, length) `{name}` array, not with a list "
                "of sequences (a list needs no padding)."
            )
        if not isinstance(prompt, (list, tuple)) or not prompt:
            raise ValueError(f"`{name}` must be a non-empty batch (a list of token-id sequences); got {prompt!r}.")
        if all(np.ndim(row) == 0 for row in prompt):
            raise ValueError(
                f"`{name}` must be a batch of sequences; got one flat sequence. Wrap it as [{name}]."
            )
        rows = [np.asarray(row) for row in prompt]
    batch = []
    for i, row in enumerate(rows):
        if row.ndim != 1:
            raise ValueError(f"`{name}` sequence {i} must be a 1-D list of token ids; got shape {row.shape}.")
        if row.size == 0:
            raise ValueError(
                f"`{name}` sequence {i} is empty; every sequence needs at least one token "
                "(e.g. a start-of-sequence token)."
            )
        if not np.issubdtype(row.dtype, np.integer):
            raise ValueError(f"`{name}` sequence {i} must hold integer token ids; got dtype {row.dtype}.")
        batch.append(row.astype("int32"))
    return batch


def check_token_range(batch, vocabulary_size, name="prompt"):
    for i, row in enumerate(batch):
        bad = row[(row < 0) | (row >= vocabulary_size)]
        if bad.size:
            raise ValueError(
                f"`{name}` sequence {i} has token id {int(bad[0])} outside the vocabulary "
                f"[0, {vocabulary_size})."
            )


def right_pad(batch, length, pad_token_id):
    """-> (B, length) int32 ids, right-padded, and the (B, length) bool mask."""
    ids = np.full((len(batch), length), pad_token_id, dtype="int32")
    mask = np.zeros((len(batch), length), dtype=bool)
    for i, row in enumerate(batch):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = True
    return ids, mask


def trim(raw, prompt_lengths, max_new_tokens, stop_token_ids, pad_token_id):
    """Cut each generated row after its own `max_new_tokens` new tokens, or
    after its first stop token (kept), whichever comes first.

    Args:
        raw: (..., L) prompt then generated tokens, right-padded prompts;
            generation ran past each row's own budget, which is dropped.
        prompt_lengths: (...) the real length of each prompt.

    Returns:
        (token_ids (..., L) with everything after the cut set to
        `pad_token_id`, lengths (...) prompt plus new tokens, new_tokens: a
        nested list (same leading shape) of each row's new tokens).
    """
    raw = np.asarray(raw)
    lead = raw.shape[:-1]
    flat = raw.reshape(-1, raw.shape[-1])
    prompt_lengths = np.asarray(prompt_lengths).reshape((-1,) + (1,) * (len(lead) - 1))
    flat_prompt_lengths = np.broadcast_to(prompt_lengths, lead).reshape(-1)
    out = np.full_like(flat, pad_token_id)
    lengths = np.zeros(len(flat), dtype="int32")
    new_tokens = []
    stops = np.asarray(sorted(stop_token_ids or ()), dtype=flat.dtype)
    for i, (row, n) in enumerate(zip(flat, flat_prompt_lengths)):
        new = row[n : n + max_new_tokens]
        hits = np.flatnonzero(np.isin(new, stops))
        if hits.size:
            new = new[: hits[0] + 1]
        out[i, :n] = row[:n]
        out[i, n : n + len(new)] = new
        lengths[i] = n + len(new)
        new_tokens.append(new.tolist())
    for size in reversed(lead[1:]):  # regroup the flat rows, e.g. (B, beams)
        new_tokens = [new_tokens[i : i + size] for i in range(0, len(new_tokens), size)]
    return out.reshape(raw.shape), lengths.reshape(lead), new_tokens
