"""The decoding loop: one position per step, in stages of growing cache.

Each step's attention reads the whole self-attention cache it is given, and
on a CPU that read, not the arithmetic, is most of a step's time once the
cache holds a few hundred positions. So the compiled function runs the loop
in stages: positions up to 64 attend over a 64-position cache, up to 128
over 128, and so on, doubling up to the full length; between two stages the
cache is zero-padded once to the next size. Every stage is the same
`while_loop` over the same step function (one forward path), and all of
them share one step function. A step's result does not depend on
its stage: positions past the current one are masked out either way.

A sampled generation compiles these functions (`zoo.generation.engine`
runs them): `Whole` (a generation to its end: the prefill and every
stage's `while_loop`, reaching the model's `call_with_cache` through one
body, `SamplingStep.body`); for a stream, `Prefill`, `Grow` and `Advance`
(one stage's loop up to a given position, the same body); and past the
model's window, `WindowStep`. Beam
search compiles its whole loop in one function (`zoo.generation.beam`).

Shape letters: B batch, L prompt plus new tokens, V vocabulary.
"""

import itertools
import weakref

import keras
from keras import ops, tree

from zoo import kernels
from zoo.generation import compiled, constraints, controls, samplers

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


def next_function(model, context, suppress_token_ids=()):
    """keras-hub's `next(token_ids, cache, index)`: the (B, V) logits for
    position `index`, from the token at index - 1 (which is written to the
    cache), `suppress_token_ids` masked out."""

    def next(token_ids, cache, index):
        previous = ops.slice(token_ids, [0, index - 1], [token_ids.shape[0], 1])  # (B, 1)
        logits, cache = model.call_with_cache(previous, cache, index - 1, context)
        return samplers.suppress(ops.cast(logits[:, 0], "float32"), suppress_token_ids), None, cache

    return next


def describe_shapes(shapes):
    """(B, P, L[, S]) in words, for the line a compilation writes."""
    words = f"batch {shapes[0]}, prompt {shapes[1]}, length {shapes[2]}"
    return words + (f", source {shapes[3]}" if len(shapes) > 3 else "")


def stage_lengths(prompt_length, length, first_stage=None):
    """Cache lengths of the stages, e.g. (8, 1032) -> (64, 128, 256, 512,
    1032): doubling from `first_stage` (`FIRST_STAGE` when None; at least
    the prompt), the last one the full `length`."""
    stages = []
    size = max(FIRST_STAGE if first_stage is None else first_stage, prompt_length)
    while 2 * size <= length:
        stages.append(size)
        size *= 2
    return tuple(stages) + (length,)


def grow_cache(cache, length):
    """Zero-pad each (B, ..., S, k) tensor of a nested cache to S = length."""

    def pad(x):
        extra = length - x.shape[-2]
        return x if extra == 0 else ops.pad(x, [[0, 0]] * (len(x.shape) - 2) + [[0, extra], [0, 0]])

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


class _ModelFunction:
    """A traced function of one model, which it holds weakly: the compiled
    functions are cached per model and must not keep it alive."""

    def __init__(self, model):
        self._model = weakref.ref(model)

    @property
    def model(self):
        return self._model()


class Prefill(_ModelFunction):
    """The traced function that starts a generation: the encoder (an
    encoder-decoder) and the prompts' positions written to a cache of the
    first stage's length, in one pass of the model's cached step.

    Call arguments: `ids` (B, L) int32 right-padded prompts, `mask` (B, L)
    bool, `*source` the encoder-decoder's (B, S) ids and padding mask.
    Returns `(context, cache)`.
    """

    def __init__(self, model, shapes, cache_length):
        super().__init__(model)
        self.shapes, self.cache_length = shapes, cache_length

    def __call__(self, ids, mask, *source):
        compiled.count_trace()
        return prefill(self.model, self.shapes, self.cache_length, ids, *source)

    def what(self, ids, mask, *source):
        return f"the prefill for {describe_shapes(self.shapes)}"


class Advance(_ModelFunction):
    """The traced function that decodes: keras-hub's sampling loop (its
    `Sampler.__call__`) from position `index` up to `until` or the end of
    the cache's stage, whichever comes first, or until every row is done.

    `zoo.generate` calls it once per stage (`until` the stage's
    end), `zoo.stream` once per token (`until` = index + 1): the same
    compiled loop, so they choose the same tokens.

    Args:
        model: the model (held weakly).
        stage_length: the cache's length in this stage.
        stop_token_ids: ids that end a row.
        suppress_token_ids: ids never chosen.
        variant: `zoo.generation.samplers.Sampling.variant`.
        controlled: whether the decoding controls are on (their arrays
            come after `sampling`).
        logprobs: None, or k: what `records` holds (`empty_records`).
        constrained: whether a row is constrained (the packed bitmask
            and the rows' flags come last, `zoo.generation.constraints`).

    Call arguments:
        index: () int32, the first position to predict.
        cache: the model's cache, its stage's length.
        token_ids: (B, L) int32, prompts and the tokens so far.
        records: what is recorded of each chosen token (`empty_records`):
            `probability` (B, L) float32, the model's probability of it
            (softmax of the logits, before the sampler's temperature and
            the controls); with log-probabilities asked, `logprob` (B, L)
            and the k likeliest alternatives, `top_ids` (B, L, k) int32
            and `top_logprobs` (B, L, k) float32.
        done: (B,) bool, rows that stopped.
        until: () int32, stop before this position.
        mask: (B, L) bool, True at prompt tokens, which are kept.
        budget_end: (B,) int32, the position after each row's last new
            token.
        context: the encoder-decoder's `start` output, or None.
        sampling: the dict of each row's `Sampling.arrays()`.
        *controls: when `controlled`, the dict of each row's
            `zoo.generation.controls` arrays; then, when `constrained`,
            `bitmask` (B, W) int32 and `flags` (B,) bool.

    Returns:
        `(index, cache, token_ids, records, done)` after the loop.
    """

    def __init__(self, model, stage_length, stop_token_ids, suppress_token_ids=(), variant=(True, True),
                 controlled=False, logprobs=None, constrained=False):
        super().__init__(model)
        self.stage_length, self.stop_token_ids = stage_length, stop_token_ids
        self.chooser = Chooser(suppress_token_ids, variant, controlled, constrained)
        self.logprobs = logprobs

    def __call__(self, index, cache, token_ids, records, done, until, mask, budget_end, context, sampling, *rest):
        compiled.count_trace()
        end = ops.minimum(until, self.stage_length)
        return sample(self.model, self.chooser.given(sampling, rest), self.stop_token_ids, end,
                      (index, cache, token_ids, records, done), mask, budget_end, context, self.logprobs)

    def what(self, index, cache, token_ids, *rest):
        return f"the decoding step for batch {token_ids.shape[0]}, cache length {self.stage_length}"


class Whole(_ModelFunction):
    """The traced function of a generation run to its end in one call (what
    `zoo.generate` runs): `Prefill`, then each stage's loop as
    `Advance` runs it (the same `SamplingStep`), the cache grown between.

    Call arguments: `ids`, `mask` as `Prefill`'s, `budget_end`, `done`,
    `sampling` and (when `controlled`) the controls' dict as `Advance`'s,
    then `*source`. Returns `(token_ids, records)` (`Advance`'s records).
    Never `constrained`: a constrained row's mask comes from the host each
    token, through `Advance`.
    """

    def __init__(self, model, shapes, stages, stop_token_ids, suppress_token_ids=(), variant=(True, True),
                 controlled=False, logprobs=None, constrained=False):
        if constrained:
            raise ValueError("A constrained decoding runs token by token (`Advance`), not in one call.")
        super().__init__(model)
        self.shapes, self.stages, self.stop_token_ids = shapes, stages, stop_token_ids
        self.chooser = Chooser(suppress_token_ids, variant, controlled)
        self.logprobs = logprobs

    def __call__(self, ids, mask, budget_end, done, sampling, *rest):
        compiled.count_trace()
        model = self.model
        controls, source = (rest[:1], rest[1:]) if self.chooser.controlled else ((), rest)
        chooser = self.chooser.given(sampling, controls)
        context, cache = prefill(model, self.shapes, self.stages[0], ids, *source)
        index = ops.min(ops.sum(ops.cast(mask, "int32"), axis=1))  # the first position to predict
        state = (index, cache, ids, empty_records(*ids.shape, self.logprobs), done)
        for stage, length in enumerate(self.stages):
            if stage:
                state = (state[0], grow_cache(state[1], length), *state[2:])
            state = sample(model, chooser, self.stop_token_ids, length, state, mask, budget_end, context,
                           self.logprobs)
        return state[2], state[3]

    def what(self, *arrays):
        return f"the generation loop for {describe_shapes(self.shapes)}"


class Chooser:
    """How a step chooses each row's token from the model's logits: the
    suppressed ids masked out, the constrained rows' disallowed tokens
    masked out (when on, `zoo.generation.constraints`), the decoding
    controls (when on, `zoo.generation.controls`), then each row's sampler
    (`zoo.generation.samplers.choose`). `given(sampling, rest)` binds a
    traced call's arrays: `rest` holds the controls' dict (when
    `controlled`), then the bitmask and the flags (when `constrained`).

    Call arguments: `logits` (B, V), `token_ids` (B, L) the buffer, `index`
    the position chosen in the buffer (a scalar, or (B,)), `prompt_lengths`
    (B,) where the new tokens begin in the buffer, `position` the position
    chosen in each row's whole sequence (the draw's counter; the buffer's
    `index` unless the buffer is a window). Returns `(token (B,) int32,
    logits (B, V) float32)`, the logits with the suppressed ids (and a
    constrained row's disallowed tokens) masked out (what a token's
    probability is read from).
    """

    def __init__(self, suppress_token_ids, variant, controlled, constrained=False):
        self.suppress_token_ids, self.variant, self.controlled = suppress_token_ids, variant, controlled
        self.constrained = constrained
        self.sampling, self.controls, self.constraint = None, None, None

    def given(self, sampling, rest):
        bound = Chooser(self.suppress_token_ids, self.variant, self.controlled, self.constrained)
        bound.sampling, bound.controls = sampling, (rest[0] if self.controlled else None)
        if self.constrained:
            bound.constraint = tuple(rest[int(self.controlled):int(self.controlled) + 2])  # (bitmask, flags)
        return bound

    def __call__(self, logits, token_ids, index, prompt_lengths, position=None):
        logits = samplers.suppress(ops.cast(logits, "float32"), self.suppress_token_ids)
        if self.constrained:
            logits = constraints.apply(logits, *self.constraint)
        chosen = logits
        if self.controlled:  # min_p reads each row's temperature: 0 (greedy) keeps the likeliest alone
            temperature = ops.expand_dims(self.sampling["temperature"], 1)
            chosen = controls.apply(logits, token_ids, index, prompt_lengths, self.controls, temperature)
        position = index if position is None else position
        return samplers.choose(chosen, self.sampling, position, self.variant), logits


def sample(model, chooser, stop_token_ids, end, state, mask, budget_end, context, logprobs=None):
    """keras-hub's sampling loop from `state` = (index, cache, token_ids,
    records, done) up to position `end`: one `while_loop` over
    `SamplingStep.body`; `logprobs` as `Advance`'s."""
    step = SamplingStep(model, chooser, context, mask, budget_end, stop_token_ids, end, logprobs)
    # The loop carries the cache in the model's loop form where it has one
    # (`loop_cache`), which XLA updates in place; the caller gets it back
    # in the form it gave.
    index, cache, *rest = state
    given = tree.flatten(cache)
    state = (index, model.loop_cache(cache) if hasattr(model, "loop_cache") else cache, *rest)
    if step.stateless:
        _, *state = ops.while_loop(step.cond, step.body, (step.variables(), *state))
    else:
        state = ops.while_loop(step.cond, step.body, state)
    index, cache, *rest = state
    cache = tree.pack_sequence_as(cache, [ops.reshape(x, y.shape) for x, y in zip(tree.flatten(cache), given)])
    return (index, cache, *rest)


class Grow(_ModelFunction):
    """The traced function between two stages: the cache zero-padded to the
    next stage's length (`grow_cache`), in one compiled call."""

    def __init__(self, model, length):
        super().__init__(model)
        self.length = length

    def __call__(self, cache):
        compiled.count_trace()
        return grow_cache(cache, self.length)

    def what(self, cache):
        return f"the cache's growth to {self.length} positions"


class WindowStep(_ModelFunction):
    """The traced function that samples past the model's window, as
    nanoGPT's `sample.py` does: a pass over each row's last W tokens
    (right-padded to W: the model is causal, so the padding changes
    nothing before a row's last token), through the model's cached step
    on an empty cache, then each row's sampler's token after its last
    position.

    Call arguments: `ids` (B, W) int32, `last` (B,) int32 the index of each
    row's last token, `position` (B,) int32 the position of the token
    chosen in the row's whole sequence (the draw's counter), `new_start`
    (B,) int32 where each row's new tokens begin in `ids`, `sampling`, and
    (when `controlled`) the controls' dict and (when `constrained`) the
    bitmask and flags as `Advance`'s. Returns
    `(tokens (B,) int32, records)`: `Advance`'s records of the one position,
    each without its L axis.
    """

    def __init__(self, model, suppress_token_ids=(), variant=(True, True), controlled=False, logprobs=None,
                 constrained=False):
        super().__init__(model)
        self.chooser = Chooser(suppress_token_ids, variant, controlled, constrained)
        self.logprobs = logprobs

    def __call__(self, ids, last, position, new_start, sampling, *rest):
        compiled.count_trace()
        model = self.model
        cache = model.empty_cache(ids.shape[0], ids.shape[1])
        logits, _ = model.call_with_cache(ids, cache, 0, None)  # (B, W, V)
        logits = ops.take_along_axis(logits, last[:, None, None], axis=1)[:, 0]  # (B, V)
        token, logits = self.chooser.given(sampling, rest)(logits, ids, last + 1, new_start, position)
        return token, record(logits, token, self.logprobs)

    def what(self, ids, *rest):
        return f"the sliding-window step for batch {ids.shape[0]}, window {ids.shape[1]}"


def empty_records(batch, length, logprobs=None):
    """The buffers of what is recorded of each chosen token (see `Advance`):
    `probability` (B, L); with `logprobs` an int k (log-probabilities
    asked), `logprob` (B, L), and for k > 0 `top_ids` and `top_logprobs`
    (B, L, k)."""
    records = {"probability": ops.zeros((batch, length), "float32")}
    if logprobs is not None:
        records["logprob"] = ops.zeros((batch, length), "float32")
    if logprobs:
        records["top_ids"] = ops.zeros((batch, length, logprobs), "int32")
        records["top_logprobs"] = ops.zeros((batch, length, logprobs), "float32")
    return records


def record(logits, token, logprobs=None):
    """What is recorded of the chosen `token` (B,) from the `logits` (B, V)
    it was chosen from: `empty_records`' entries for one position."""
    if logprobs is None:
        return {"probability": _probability_of(logits, token)}
    logprob = ops.log_softmax(logits, axis=-1)
    values = {"logprob": ops.take_along_axis(logprob, token[:, None], axis=1)[:, 0]}
    values["probability"] = ops.exp(values["logprob"])
    if logprobs:
        values["top_logprobs"], top_ids = kernels.top_k(logprob, logprobs)
        values["top_ids"] = ops.cast(top_ids, "int32")
    return values


def _probability_of(logits, token):
    """(B,) softmax(logits)[b, token[b]], as exp(logits[b, token[b]] - m) /
    sum(exp(logits[b] - m)) with m the row's maximum: the one entry of the
    softmax that is kept, without writing the other V - 1."""
    maximum = ops.max(logits, axis=-1, keepdims=True)
    total = ops.sum(ops.exp(logits - maximum), axis=-1)
    chosen = ops.take_along_axis(logits, token[:, None], axis=1)[:, 0]
    return ops.exp(chosen - maximum[:, 0]) / total


def _write(records, index, values):
    """`records` with each entry's position `index` set to `values`' entry."""
    return {name: ops.slice_update(buffer, [0, index] + [0] * (len(buffer.shape) - 2), ops.expand_dims(values[name], 1))
            for name, buffer in records.items()}


class SamplingStep:
    """The `while_loop` of `Advance`: `cond` and `body` over
    `(index, cache, token_ids, records, done)`, up to position `end`.

    On JAX the loop also carries the model's variables, read through a
    `StatelessScope` (keras-hub's `Sampler.run_loop`), in the layout of
    `KernelLayout`.
    """

    def __init__(self, model, chooser, context, mask, budget_end, stop_token_ids, end, logprobs=None):
        self.model, self.chooser, self.context, self.logprobs = model, chooser, context, logprobs
        self.mask, self.budget_end, self.stop_token_ids, self.end = mask, budget_end, stop_token_ids, end
        self.stateless = keras.config.backend() == "jax"
        self.layout = KernelLayout(model)

    def variables(self):
        """(JAX) The loop's first `state`: the model's trainable and
        non-trainable variables, as tensors, the kernels in the loop's
        layout (`KernelLayout`)."""
        return self.layout.into_loop(self.model.trainable_variables, self.model.non_trainable_variables)

    def cond(self, *loop_vars):
        index, cache, token_ids, records, done = loop_vars[1:] if self.stateless else loop_vars
        finished = ops.logical_or(index >= self.budget_end, done)
        return ops.logical_and(index < self.end, ops.logical_not(ops.all(finished)))

    def body(self, *loop_vars):
        """Position `index`: its logits from the token at index - 1 (written
        to the cache), each row's sampler's token after its prompt, the
        prompt's token inside it."""
        state, (index, cache, token_ids, records, done) = (
            (loop_vars[0], loop_vars[1:]) if self.stateless else (None, loop_vars)
        )
        with self._scope(state):
            previous = ops.slice(token_ids, [0, index - 1], [token_ids.shape[0], 1])  # (B, 1)
            logits, cache = self.model.call_with_cache(previous, cache, index - 1, self.context)
            prompt_lengths = ops.sum(ops.cast(self.mask, "int32"), axis=1)  # the mask is True at prompt tokens
            token, logits = self.chooser(logits[:, 0], token_ids, index, prompt_lengths)  # (B,), (B, V)
            in_prompt = self.mask[:, index]
            token = ops.where(in_prompt, token_ids[:, index], token)  # (B,)
            token_ids = ops.slice_update(token_ids, [0, index], token[:, None])
            records = _write(records, index, record(logits, token, self.logprobs))
            if self.stop_token_ids:
                stopped = ops.logical_and(self._is_stop(token), ops.logical_not(in_prompt))
                done = ops.logical_or(done, stopped)
            loop_vars = (index + 1, cache, token_ids, records, done)
        return loop_vars if state is None else (state, *loop_vars)

    def _scope(self, state):
        if state is None:
            return _NoScope()
        trainable, non_trainable = state
        layout, model = self.layout, self.model
        mapping = itertools.chain(
            zip(model.trainable_variables, layout.in_loop(model.trainable_variables, trainable)),
            zip(model.non_trainable_variables, layout.in_loop(model.non_trainable_variables, non_trainable)),
        )
        return keras.StatelessScope(state_mapping=mapping)

    def _is_stop(self, tokens):
        hit = ops.zeros_like(tokens, dtype="bool")
        for stop in self.stop_token_ids:
            hit = ops.logical_or(hit, ops.equal(tokens, stop))
        return hit


def transposes_kernels():
    """Whether the decoding loop carries the Dense kernels transposed
    (`KernelLayout`): on JAX with a GPU."""
    if keras.backend.backend() != "jax":
        return False
    import jax

    return jax.default_backend() == "gpu"


class KernelLayout:
    """The layout in which the decoding loop carries the model's Dense
    kernels: on a GPU (`transposes_kernels`), each floating (in, out) kernel
    as its (out, in) transpose, made once before the loop, and transposed
    back where the loop's body reads it, so that the model computes with the
    kernel it has. The product itself then reads the (out, in) layout.

    Why: at one position per step, XLA's GPU compiler makes x W a multiply
    and a sum over `in`. Over (in, out) that sum runs down columns, and
    where `out` is narrow (GPT-2's 768: the attention's output projection
    and the MLP's second product) XLA writes the whole elementwise product
    to memory and sums it in a second kernel (9.4 MB per layer and token
    for GPT-2 small's MLP); over (out, in) the sum runs along rows, one
    kernel that writes only its output (`benchmarks/gpu/gpu_program.py` counts
    both). The
    transposition is behind an optimization barrier: without one XLA folds
    the two transpositions into one layout and the loop reads (in, out)
    again. Elsewhere (a CPU; TensorFlow and PyTorch, whose loops read the
    variables themselves) the kernels are read as stored, and quantized
    kernels are read as stored everywhere.
    """

    def __init__(self, model):
        self.transposed = set()
        if not transposes_kernels():
            return
        for layer in model._flatten_layers():
            kernel = getattr(layer, "_kernel", None) if isinstance(layer, keras.layers.Dense) else None
            if kernel is not None and len(kernel.shape) == 2 and layer.quantization_mode is None:
                self.transposed.add(id(kernel))

    def into_loop(self, *variable_lists):
        """The loop's first values of each list of variables (tensors)."""
        values = [[ops.convert_to_tensor(v) for v in variables] for variables in variable_lists]
        if not self.transposed:
            return values
        import jax

        picked = [(i, j) for i, variables in enumerate(variable_lists)
                  for j, v in enumerate(variables) if id(v) in self.transposed]
        moved = jax.lax.optimization_barrier([ops.transpose(values[i][j]) for i, j in picked])
        for (i, j), value in zip(picked, moved):
            values[i][j] = value
        return values

    def in_loop(self, variables, values):
        """The values the model reads inside the loop: each kernel carried
        transposed, transposed back."""
        return [ops.transpose(value) if id(v) in self.transposed else value for v, value in zip(variables, values)]


class _NoScope:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
