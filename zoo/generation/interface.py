"""What generation needs from a model: a cached step the model owns.

`zoo.generate` and `beam_search` talk to a model only through these
attributes and methods (as keras-hub's `generate_step` calls only its
task's `call_with_cache`), so a new family plugs in without touching the
decoding loop:

    model.vocabulary_size       # V, an int
    model.max_sequence_length   # the most positions a sequence may have
    model.is_encoder_decoder    # True: `generate` takes a `source`
    model.empty_cache(batch_size, length)
        # -> the zero key/value cache: a tuple (or any nested structure)
        #    of tensors with the batch on axis 0 and the position on the
        #    axis before the last, e.g. N per-layer pairs of (B, h, length, k)
        #    keys and values
    model.call_with_cache(token_ids, cache, cache_index, context)
        # token_ids (B, T) int32 at positions cache_index..cache_index+T-1
        # -> ((B, T, V) logits, the cache with those positions written);
        #    `cache_index` a scalar, or (B,) one a row (`Slots`)

and, optionally,

    model.loop_cache(cache)
        # -> the same tensors reshaped into the form a compiled decoding
        #    loop carries (e.g. at batch 1 (h, length, k), which the
        #    attention reads without a reshape, so that XLA writes each step
        #    in place); `call_with_cache` takes either form and returns the
        #    one given

and, for an encoder-decoder (`is_encoder_decoder = True`), also

    model.source_vocabulary_size
    model.start(source_ids, source_padding_mask)
        # -> the `context` every step reads (e.g. the projected encoder
        #    output): a nested structure of tensors, batch on axis 0 and
        #    the source position on axis 1 (a (B, S) mask) or on the axis
        #    before the last (as the cache's, e.g. (B, h, S, k) keys and
        #    values), where
        #    `Slots` zero-pads a context to a longer source

A decoder-only model gets `context=None`. The loop first calls
`call_with_cache` on the right-padded prompts at index 0 (the prefill),
then once per new position with one token. Rows of different prompt
lengths share positions: a model must see position i of every row at
`cache_index` i, and its causal mask over absolute positions must hide the
cache slots not written yet.

Shape letters: B batch, T new positions, V vocabulary.
"""

METHODS = ("empty_cache", "call_with_cache")
ATTRIBUTES = ("vocabulary_size", "max_sequence_length", "is_encoder_decoder")


def check_model(model):
    """Raise one clear ValueError if `model` lacks the cached step."""
    missing = [name for name in METHODS + ATTRIBUTES if not hasattr(model, name)]
    if getattr(model, "is_encoder_decoder", False):
        missing += [name for name in ("start", "source_vocabulary_size") if not hasattr(model, name)]
    if missing:
        raise ValueError(
            f"{type(model).__name__} has no cached step (it lacks {', '.join(missing)}), so `generate` "
            "cannot run it: encoder-only models (such as BERT's) cannot generate. Use a decoder-only "
            "model (e.g. zoo.build('gpt-nano', task='causal_lm')) or an encoder-decoder (e.g. "
            "zoo.build('transformer-tiny')); `zoo.generation.interface` lists the methods a model needs."
        )
