"""The decoding loop: one position per step, in stages of growing cache.

Each step's attention reads the whole self-attention cache it is given, and
on a CPU that read, not the arithmetic, is most of a step's time once the
cache holds a few hundred positions. So the compiled function runs the loop
in stages: positions up to 64 attend over a 64-position cache, up to 128
over 128, and so on, doubling up to the full length; between two stages the
cache is zero-padded once to the next size. Every stage is the same
`while_loop` over the same step function (one forward path), and all of
them live in the one compiled function. A step's result does not depend on
its stage: positions past the current one are masked out either way.

Shape letters: B batch, L prompt plus new tokens.
"""

from keras import ops, tree

FIRST_STAGE = 64


def prefill(model, shapes, cache_length, ids, source_ids=None, source_padding_mask=None):
    """Encode once (an encoder-decoder) and fill a cache of `cache_length`
    positions with the right-padded prompts, through the model's own
    cached step. `shapes` is (B, P, ...) -> (context, cache)."""
    batch, longest = shapes[:2]
    context = model.start(source_ids, source_padding_mask) if model.is_encoder_decoder else None
    cache = model.empty_cache(batch, cache_length)
    _, cache = model.call_with_cache(ids[:, :longest], cache, 0, context)
    return context, cache


def next_function(model, context):
    """keras-hub's `next(token_ids, cache, index)`: the (B, V) logits for
    position `index`, from the token at index - 1 (which is written to the
    cache)."""

    def next(token_ids, cache, index):
        previous = ops.slice(token_ids, [0, index - 1], [token_ids.shape[0], 1])  # (B, 1)
        logits, cache = model.call_with_cache(previous, cache, index - 1, context)
        return ops.cast(logits[:, 0], "float32"), None, cache

    return next


def stage_lengths(prompt_length, length):
    """Cache lengths of the stages, e.g. (8, 1032) -> (64, 128, 256, 512,
    1032): doubling from `FIRST_STAGE` (at least the prompt), the last one
    the full `length`."""
    stages = []
    size = max(FIRST_STAGE, prompt_length)
    while 2 * size <= length:
        stages.append(size)
        size *= 2
    return tuple(stages) + (length,)


def grow_cache(cache, length):
    """Zero-pad each (B, 2, h, S, k) cache of a nested structure to S = length."""

    def pad(x):
        extra = length - x.shape[3]
        return x if extra == 0 else ops.pad(x, [[0, 0], [0, 0], [0, 0], [0, extra], [0, 0]])

    return tree.map_structure(pad, cache)


def while_loop(cond, body, loop_vars):
    return ops.while_loop(cond, body, loop_vars)


def run_in_stages(cond, body, index, cache, state, stages, run_loop=while_loop):
    """Run `body(index, cache, *state)` while `cond(...)` holds and `index`
    is inside the stage, through every stage in `stages`.

    `run_loop(cond, body, loop_vars)` runs one `while_loop` (keras-hub's
    samplers pass theirs, which threads their random state on JAX).
    Returns `(index, cache, state)`.
    """
    for stage, length in enumerate(stages):
        if stage:
            cache = grow_cache(cache, length)

        def stage_cond(index, cache, *state, length=length):
            return ops.logical_and(index < length, cond(index, cache, *state))

        index, cache, *state = run_loop(stage_cond, body, (index, cache, *state))
    return index, cache, tuple(state)


def sample(sampler, next, token_ids, cache, index, mask, budget_end, stop_token_ids, stages, model=None):
    """Sample with a keras-hub sampler (its `compute_probabilities`,
    `get_next_token` and `run_loop`), keras-hub's `Sampler.__call__` loop
    carried through the stages.

    Args:
        sampler: a `keras_hub.samplers.Sampler`.
        next: `next(token_ids, cache, index) -> (logits (B, V), _, cache)`,
            the logits for position `index`.
        token_ids: (B, L) int32, right-padded prompts.
        cache: the prefilled cache, sized `stages[0]`.
        index: the first position to predict (the shortest prompt's length).
        mask: (B, L) bool, True at prompt tokens, which are kept.
        budget_end: (B,) the position after each row's last new token.
        stop_token_ids: a tuple of ids; a row that emitted one is done.

    Returns:
        (B, L) int32 token ids.
    """

    def is_stop(tokens):
        hit = ops.zeros_like(tokens, dtype="bool")
        for stop in stop_token_ids:
            hit = ops.logical_or(hit, ops.equal(tokens, stop))
        return hit

    def cond(index, cache, token_ids, *done):
        finished = index >= budget_end
        if done:
            finished = ops.logical_or(finished, done[0])
        return ops.logical_not(ops.all(finished))

    def body(index, cache, token_ids, *done):
        logits, _, cache = next(token_ids, cache, index)
        token = ops.cast(sampler.get_next_token(sampler.compute_probabilities(logits)), "int32")
        in_prompt = mask[:, index]
        token = ops.where(in_prompt, token_ids[:, index], token)  # (B,)
        token_ids = ops.slice_update(token_ids, [0, index], token[:, None])
        if done:
            done = (ops.logical_or(done[0], ops.logical_and(is_stop(token), ops.logical_not(in_prompt))),)
        return index + 1, cache, token_ids, *done

    def run_loop(cond, body, loop_vars):
        return sampler.run_loop(cond, body, loop_vars=loop_vars, model=model)

    # `done` only with stop tokens: TensorFlow's XLA bridge fails on three
    # loops in a row that pass a constant through (tensorflow#122886).
    state = (token_ids, ops.zeros((token_ids.shape[0],), "bool")) if stop_token_ids else (token_ids,)
    _, _, state = run_in_stages(cond, body, index, cache, state, stages, run_loop)
    return state[0]
