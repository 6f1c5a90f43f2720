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

`SamplingLoop` is the function that `generate` compiles for a keras-hub
sampler: `SamplingLoop(...)(ids, mask)` reaches the model's
`call_with_cache` through one `while_loop` body (`SamplingStep.body`).

Shape letters: B batch, L prompt plus new tokens, V vocabulary.
"""

import itertools
import weakref

import keras
from keras import ops, tree

from zoo.generation import compiled, samplers

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


def run_in_stages(cond, body, index, cache, state, stages):
    """Run `body(index, cache, *state)` while `cond(...)` holds and `index`
    is inside the stage, through every stage in `stages` (beam search's
    loop). Returns `(index, cache, state)`."""
    for stage, length in enumerate(stages):
        if stage:
            cache = grow_cache(cache, length)

        def stage_cond(index, cache, *state, length=length):
            return ops.logical_and(index < length, cond(index, cache, *state))

        index, cache, *state = ops.while_loop(stage_cond, body, (index, cache, *state))
    return index, cache, tuple(state)


class SamplingLoop:
    """The traced function of one `generate` configuration: the prefill,
    then keras-hub's sampling loop (its `Sampler.__call__`) carried through
    the cache stages.

    Args:
        model: the model (held weakly).
        static: what the trace depends on: `shapes` (B, P, L[, S]),
            `stop_token_ids`, `max_new_tokens`, `stages`.
        config: a `zoo.generation.samplers.sampler_config`.

    Call arguments:
        ids: (B, L) int32, right-padded prompts.
        mask: (B, L) bool, True at prompt tokens, which are kept.
        *source: the encoder-decoder's (B, S) source ids and padding mask.

    Returns:
        A tuple of the (B, L) int32 token ids.
    """

    def __init__(self, model, static, config):
        self._model = weakref.ref(model)
        self.static = static
        self.sampler = samplers.keras_hub_sampler(config)

    @property
    def model(self):
        return self._model()

    def __call__(self, ids, mask, *source):
        compiled.count_trace()
        model, static = self.model, self.static
        lengths = ops.sum(ops.cast(mask, "int32"), axis=1)  # (B,)
        context, cache = prefill(model, static.shapes, static.stages[0], ids, *source)
        index = ops.min(lengths)  # the first position to predict
        budget_end = lengths + static.max_new_tokens  # (B,) the position after each row's last new token
        # `done` only with stop tokens: TensorFlow's XLA bridge fails on three
        # loops in a row that pass a constant through (tensorflow#122886).
        state = (ids, ops.zeros((ids.shape[0],), "bool")) if static.stop_token_ids else (ids,)
        for stage, length in enumerate(static.stages):
            if stage:
                cache = grow_cache(cache, length)
            step = SamplingStep(model, self.sampler, context, mask, budget_end, static.stop_token_ids, length)
            if not step.stateless:
                index, cache, *state = ops.while_loop(step.cond, step.body, (index, cache, *state))
                continue
            variables, index, cache, *state = ops.while_loop(
                step.cond, step.body, (step.variables(), index, cache, *state)
            )
            step.assign(variables)
        return (state[0],)


class SamplingStep:
    """One stage's `while_loop` of `SamplingLoop`: `cond` and `body` over
    `(index, cache, token_ids[, done])`, up to position `end`.

    On JAX the loop also carries the sampler's and the model's variables,
    read through a `StatelessScope` (keras-hub's `Sampler.run_loop`), so
    that the sampler's random state advances inside the compiled loop.
    """

    def __init__(self, model, sampler, context, mask, budget_end, stop_token_ids, end):
        self.model, self.sampler, self.context = model, sampler, context
        self.mask, self.budget_end, self.stop_token_ids, self.end = mask, budget_end, stop_token_ids, end
        self.stateless = keras.config.backend() == "jax"

    def variables(self):
        """(JAX) The loop's first `state`: the sampler's, the model's
        trainable and non-trainable variables, as tensors."""
        return (
            [ops.convert_to_tensor(v) for v in self.sampler.variables],
            [ops.convert_to_tensor(v) for v in self.model.trainable_variables],
            [ops.convert_to_tensor(v) for v in self.model.non_trainable_variables],
        )

    def assign(self, state):
        """(JAX) The sampler's random state after the loop, kept."""
        for variable, value in zip(self.sampler.variables, state[0]):
            variable.assign(value)

    def cond(self, *loop_vars):
        index, cache, token_ids, *done = loop_vars[1:] if self.stateless else loop_vars
        in_stage = index < self.end
        finished = index >= self.budget_end
        if done:
            finished = ops.logical_or(finished, done[0])
        return ops.logical_and(in_stage, ops.logical_not(ops.all(finished)))

    def body(self, *loop_vars):
        """Position `index`: its logits from the token at index - 1 (written
        to the cache), the sampler's token after a row's prompt, the
        prompt's token inside it."""
        state, (index, cache, token_ids, *done) = (loop_vars[0], loop_vars[1:]) if self.stateless else (None, loop_vars)
        sampler = self.sampler
        with self._scope(state) as scope:
            previous = ops.slice(token_ids, [0, index - 1], [token_ids.shape[0], 1])  # (B, 1)
            logits, cache = self.model.call_with_cache(previous, cache, index - 1, self.context)
            logits = ops.cast(logits[:, 0], "float32")  # (B, V)
            token = ops.cast(sampler.get_next_token(sampler.compute_probabilities(logits)), "int32")
            in_prompt = self.mask[:, index]
            token = ops.where(in_prompt, token_ids[:, index], token)  # (B,)
            token_ids = ops.slice_update(token_ids, [0, index], token[:, None])
            if done:
                stopped = ops.logical_and(self._is_stop(token), ops.logical_not(in_prompt))
                done = (ops.logical_or(done[0], stopped),)
            loop_vars = (index + 1, cache, token_ids, *done)
        if not self.stateless:
            return loop_vars
        sampler_values = []
        for variable in sampler.variables:
            new = scope.get_current_value(variable)
            sampler_values.append(new if new is not None else variable)
        return ((sampler_values, *state[1:]), *loop_vars)

    def _scope(self, state):
        if state is None:
            return _NoScope()
        sampler_values, trainable, non_trainable = state
        mapping = itertools.chain(
            zip(self.sampler.variables, sampler_values),
            zip(self.model.trainable_variables, trainable),
            zip(self.model.non_trainable_variables, non_trainable),
        )
        return keras.StatelessScope(state_mapping=mapping)

    def _is_stop(self, tokens):
        hit = ops.zeros_like(tokens, dtype="bool")
        for stop in self.stop_token_ids:
            hit = ops.logical_or(hit, ops.equal(tokens, stop))
        return hit


class _NoScope:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
