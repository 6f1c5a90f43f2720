"""The decoding engine: one sampled generation, run step by step.

`zoo.generate`, `zoo.stream`, `zoo serve` and `zoo explore` all decode
through a `Decoding` (text through `zoo.text.TextGeneration`):

    decoding = Decoding(model, [[1, 2, 3]], budgets=8, sampling=dict(sampler="top_p", top_p=0.9, seed=0))
    for new in decoding.steps(every_token=True):
        new  # B lists: the tokens each row gained in this step
    decoding.new_tokens  # B lists of new tokens, each cut at its budget or stop token

How it runs (the compiled functions are `zoo.generation.loop`'s, cached by
`zoo.generation.compiled`):
1. `Prefill`: the encoder (an encoder-decoder) and the right-padded
   prompts into a cache of the first stage's length.
2. `Advance`, per cache stage: keras-hub's sampling loop, one position per
   step through the model's `call_with_cache`; `steps(every_token=True)`
   (what a stream runs) calls it once per token. `steps(every_token=False)`
   (what `generate` runs) runs the prefill and every stage's loop in one
   compiled call, `Whole`, with no host round trip between stages. Both run
   the same loop body (`loop.SamplingStep`), so they choose the same tokens
   (tested for every sampler, on each backend).
3. `WindowStep` (only with `slide=True`, text generation past the model's
   window W): nanoGPT's sampling, each token from a pass over the row's
   last W tokens.

Each row has its own sampler, settings and seed
(`zoo.generation.samplers.Sampling`), inputs of the compiled functions like
the decoding controls: a row's draw at a position comes from its seed and
that position alone, so a row chooses the same tokens alone or in any
batch, and decodings may interleave. The functions hold no random state.

Shape letters: B batch, P longest prompt, L = P + new tokens, S longest
source, W the model's window.
"""

import dataclasses

import numpy as np
from keras import ops, tree

from zoo.generation import compiled, loop, prompts, samplers, speculative
from zoo.generation.constraints import Constraints
from zoo.generation.controls import Controls
from zoo.generation.interface import check_model

STOP, LENGTH = "stop", "length"  # why a row ended (OpenAI's `finish_reason`)


class Decoding:
    """One generation of B prompts, each row with its own sampler.

    Args:
        model: a model with a cached step (`zoo.generation.interface`).
        prompt: B token-id sequences (a list of lists, or a (B, T) array
            with `padding_mask`).
        budgets: the most new tokens, one int or one per row.
        sampling: the settings of `zoo.generation.samplers.Sampling`
            (`sampler`, `temperature`, `top_k`, `top_p`, `seed`: each one
            value, or one a row), or None (greedy).
        stop_token_ids: ids that end a row (the stop token is kept).
        padding_mask, source, source_padding_mask: as
            `zoo.generate`'s.
        slide: past the model's window W, go on with nanoGPT's sliding
            window (decoder-only); False refuses a budget that does not fit.
        bucket: which compiled shapes are rounded up, so that requests
            of many sizes share a bounded set of compiled programs:
            "lengths" (the default) rounds the longest prompt and prompt
            plus new tokens each to a power of two, at least 16 and 64
            positions (at most the model's window), and an
            encoder-decoder's longest source to one of at least 16; True
            also rounds the batch to a power of two, an int larger than
            the batch to that many rows, with rows that are done from the
            start (what a server wants); False compiles the exact shapes.
            The padding is masked out: each row's tokens are the same up
            to floating-point rounding.
        suppress_token_ids: ids never chosen (their logits masked out:
            transformers' single-token `bad_words_ids`, Marian's `<pad>`).
        controls: the settings of `zoo.generation.controls.Controls` (the
            penalties, `min_p`, `logit_bias`: each one value, or one a
            row), or None. Controls that are all off leave the compiled
            functions as without them.
        logprobs: None, or k: record each new token's log-probability under
            the model (its logits before the sampler's temperature and the
            controls, the suppressed ids masked out) and its k likeliest
            alternatives, computed inside the compiled loop.
        speculation: None, or the settings of speculative decoding
            (`zoo.generation.speculative.Speculation`: `assistant_model`
            or `prompt_lookup_num_tokens`, ...): within the window, one
            prompt's tokens are proposed and checked several at a time,
            keeping the model's distribution (greedy: the same tokens).
        constraints: None, one grammar for every row, or B grammars
            (`zoo.generation.constraints.grammar`'s, None for a free row):
            a constrained row chooses only tokens its grammar allows,
            a stop token only where the grammar accepts, and ends once
            nothing more can follow. A constrained decoding runs token by
            token (the host's matchers give each step's mask).
        tokenizer: the tokenizer whose vocabulary the grammars read (with
            `constraints`); the model's own (`model.tokenizer`) when None.

    Attributes:
        prompt_lengths: (B,) int32.
        new_tokens: B lists of new token ids.
        probabilities: B lists, the model's probability of each new token.
        token_logprobs, top_ids, top_logprobs: with `logprobs`, B lists:
            each new token's log-probability, and the ids and
            log-probabilities of its k likeliest alternatives (lists of k,
            the likeliest first).
        finish_reasons: B of `STOP` (a stop token, or `finish(row)`),
            `LENGTH` (the budget) or None (not finished yet).
    """

    def __init__(self, model, prompt, budgets, sampling=None, stop_token_ids=None, *, padding_mask=None,
                 source=None, source_padding_mask=None, slide=False, bucket="lengths", suppress_token_ids=None,
                 controls=None, logprobs=None, constraints=None, tokenizer=None, speculation=None):
        check_model(model)
        self.model = model
        self.logprobs = check_logprobs(logprobs, model.vocabulary_size)
        rows = prompts.as_batch(prompt, padding_mask, "prompt")
        prompts.check_token_range(rows, model.vocabulary_size, "prompt")
        self.speculation = None
        if speculation is not None:
            if self.logprobs is not None:
                raise ValueError("`logprobs` is not recorded with speculative decoding; ask for one or the other.")
            self.speculation = speculative.Speculation(model, len(rows), **speculation)
        controls = Controls(len(rows), model.vocabulary_size, **(controls or {}))
        sampling = samplers.Sampling(len(rows), model.vocabulary_size, **(sampling or {}))
        self.budgets = _budgets(budgets, len(rows))
        padding = (1 << (len(rows) - 1).bit_length()) - len(rows) if bucket is True else 0
        if not isinstance(bucket, bool) and isinstance(bucket, int) and bucket > len(rows):
            padding = bucket - len(rows)
        rows = rows + [rows[0]] * padding
        self.budgets = np.concatenate([self.budgets, np.ones(padding, "int64")])
        if source is not None and padding:
            source = list(prompts.as_batch(source, source_padding_mask, "source"))
            source, source_padding_mask = source + [source[0]] * padding, None
        self.rows = [row.tolist() for row in rows]
        self.prompt_lengths = np.array([len(row) for row in rows], "int32")
        self.stop_token_ids = check_stop_tokens(stop_token_ids, model.vocabulary_size)
        self.suppress_token_ids = samplers.check_suppressed(suppress_token_ids, model.vocabulary_size)
        self.window = model.max_sequence_length
        if slide and model.is_encoder_decoder:
            raise ValueError("Only a decoder-only model generates past its window; an encoder-decoder stops there.")
        cached = int(self.budgets.max())
        if slide:
            cached = min(cached, self.window - int(self.prompt_lengths.max()))
        self.request = None
        if cached > 0:
            self.request = Request(model, rows, cached, self.stop_token_ids, source, source_padding_mask, bucket,
                                   self.suppress_token_ids)
        elif source is not None:
            raise ValueError(f"{type(model).__name__} is decoder-only and takes no `source`.")
        # Each row's sampling and controls arrays, the padding rows repeating
        # row 0; no controls compiled in when they are all off.
        self.sampling = _padded(sampling.arrays(), padding)
        self.variant = sampling.variant
        self.controls = _padded(controls.arrays(), padding) if controls.active else None
        batch = len(rows)
        self.new_tokens = [[] for _ in range(batch)]
        self.probabilities = [[] for _ in range(batch)]
        self.token_logprobs = [[] for _ in range(batch)]
        self.top_ids = [[] for _ in range(batch)]
        self.top_logprobs = [[] for _ in range(batch)]
        self.finish_reasons = [None] * (batch - padding) + [STOP] * padding  # the padding rows are done
        self.constraints = _constraints(model, constraints, tokenizer, batch - padding, padding, self.stop_token_ids)
        if self.constraints is not None and self.speculation is not None:
            raise ValueError("Constrained decoding masks each token on the host; it does not take speculative "
                             "decoding (`assistant_model`, `prompt_lookup_num_tokens`).")

    @property
    def finished(self):
        return all(reason is not None for reason in self.finish_reasons)

    def finish(self, row):
        """Ends `row` now (e.g. a stop string came): its finish reason is `STOP`."""
        if self.finish_reasons[row] is None:
            self.finish_reasons[row] = STOP

    def steps(self, every_token=False):
        """Decodes, yielding after each compiled call B lists of the tokens
        each row gained (empty for a row that gained none). Stops when every
        row has finished; a caller that stops iterating stops the decoding."""
        if self.request is not None:
            yield from self._within_window(every_token)
        while not self.finished:
            yield self._window_step()

    def run(self):
        """Decodes to the end; returns `self`. The loop of `steps`, written
        out: `zoo.generate` reaches the compiled loop one frame sooner."""
        if self.request is not None:
            for _ in self._within_window(every_token=False):
                pass
        while not self.finished:
            self._window_step()
        return self

    # --- Within the window: the cached loop ------------------------------------------

    def _within_window(self, every_token):
        if self.speculation is not None:
            return speculative.rounds(self)
        return self._cached_steps(every_token)

    def _cached_steps(self, every_token):
        model, request = self.model, self.request
        ids, mask, *source = request.arrays
        batch, _, length = request.shapes[:3]
        stages = request.static.stages
        index = int(self.prompt_lengths.min())
        every_token = every_token or self.constraints is not None  # each step's mask comes from the host
        budget_end = (self.prompt_lengths + np.minimum(self.budgets, request.max_new_tokens)).astype("int32")
        if not every_token:
            key = ("whole", request.shapes, self.stop_token_ids, self.suppress_token_ids, self._static())
            whole = _function(model, key, loop.Whole, model, request.shapes, stages, self.stop_token_ids,
                              self.suppress_token_ids, *self._static())
            done = np.array([reason is not None for reason in self.finish_reasons])
            token_ids, records = whole(ids, mask, budget_end, done, self.sampling, *self._controls(), *source)
            yield self._take(token_ids, records, index, length)
            return
        prefill = _function(model, ("prefill", request.shapes, stages[0]), loop.Prefill, model, request.shapes,
                            stages[0])
        context, cache = prefill.raw(ids, mask, *source)
        token_ids, records = ids, loop.empty_records(batch, length, self.logprobs)
        for stage_length in stages:
            if index >= stage_length:
                continue
            # Past the prefill the prompts' padded width P plays no part: one program serves every P.
            shapes = request.shapes[:1] + request.shapes[2:]
            if tree.flatten(cache)[0].shape[-2] < stage_length:
                grow = _function(model, ("grow", shapes, stage_length), loop.Grow, model, stage_length)
                cache = grow.raw(cache)
            key = ("advance", shapes, stage_length, self.stop_token_ids, self.suppress_token_ids, self._static())
            advance = _function(model, key, loop.Advance, model, stage_length, self.stop_token_ids,
                                self.suppress_token_ids, *self._static())
            while index < stage_length and not self.finished:
                until = index + 1
                done = np.array([reason is not None for reason in self.finish_reasons])
                index_out, cache, token_ids, records, _ = advance.raw(
                    np.array(index, "int32"), cache, token_ids, records, done, np.array(until, "int32"),
                    mask, budget_end, context, self.sampling, *self._controls(), *self._constraint(),
                )
                end = int(ops.convert_to_numpy(index_out))
                yield self._take(ops.convert_to_numpy(token_ids), tree.map_structure(ops.convert_to_numpy, records),
                                 index, end)
                index = end
                if index >= length:
                    break
            if self.finished or index >= length:
                break

    def _take(self, token_ids, records, start, end):
        """The new tokens of positions start..end-1 into each unfinished row."""
        gained = [[] for _ in self.rows]
        for row, prompt_length in enumerate(self.prompt_lengths):
            for position in range(max(start, int(prompt_length)), end):
                if self.finish_reasons[row] is not None:
                    break
                recorded = {name: values[row, position] for name, values in records.items()}
                self._append(row, int(token_ids[row, position]), recorded, gained)
        return gained

    def _append(self, row, token, recorded, gained):
        """Adds `token` to `row`, with what was `recorded` of it (`loop.record`'s entries)."""
        self.new_tokens[row].append(token)
        self.probabilities[row].append(float(recorded["probability"]))
        if self.logprobs is not None:
            self.token_logprobs[row].append(float(recorded["logprob"]))
            self.top_ids[row].append(np.asarray(recorded.get("top_ids", ()), "int32").tolist())
            self.top_logprobs[row].append(np.asarray(recorded.get("top_logprobs", ()), "float32").tolist())
        gained[row].append(token)
        ended = self.constraints is not None and self.constraints.consume(row, token)
        if token in self.stop_token_ids or ended:
            self.finish_reasons[row] = STOP
        elif len(self.new_tokens[row]) >= self.budgets[row]:
            self.finish_reasons[row] = LENGTH

    # --- Past the window: nanoGPT's sliding window -----------------------------------

    def _window_step(self):
        window = self.window
        ids = np.zeros((len(self.rows), window), "int32")
        last = np.zeros(len(self.rows), "int32")
        position = np.zeros(len(self.rows), "int32")  # of the token chosen, in the row's whole sequence
        new_start = np.zeros(len(self.rows), "int32")  # where a row's new tokens begin in its window
        for row, (prompt, new) in enumerate(zip(self.rows, self.new_tokens)):
            recent = (prompt + new)[-window:]
            ids[row, : len(recent)] = recent
            last[row] = len(recent) - 1
            position[row] = len(prompt) + len(new)
            new_start[row] = max(len(recent) - len(new), 0)
        key = ("window", ids.shape, self.suppress_token_ids, self._static())
        step = _function(self.model, key, loop.WindowStep, self.model, self.suppress_token_ids, *self._static())
        tokens, records = step(ids, last, position, new_start, self.sampling, *self._controls(), *self._constraint())
        gained = [[] for _ in self.rows]
        for row, token in enumerate(tokens.tolist()):
            if self.finish_reasons[row] is None:
                self._append(row, int(token), {name: values[row] for name, values in records.items()}, gained)
        return gained

    def _controls(self):
        """The controls' arguments of a compiled call: none without them."""
        return () if self.controls is None else (self.controls,)

    def _constraint(self):
        """The constraint's arguments of a compiled call (the packed
        bitmask and the rows' flags): none without constraints."""
        return () if self.constraints is None else self.constraints.arrays()

    def _static(self):
        """What a compiled function's program depends on beyond the shapes:
        the sampling variant, whether the controls are on, the
        log-probabilities asked, and whether a row is constrained (not
        which grammar: one program serves every grammar)."""
        return self.variant, self.controls is not None, self.logprobs, self.constraints is not None


def _constraints(model, grammars, tokenizer, batch, padding, stop_token_ids):
    """The decoding's `Constraints` (padding rows free), or None when no row is constrained."""
    if grammars is None:
        return None
    grammars = [grammars] * batch if isinstance(grammars, str) else list(grammars)
    if len(grammars) != batch or not all(g is None or isinstance(g, str) for g in grammars):
        raise ValueError(f"`constraints` must be one grammar or {batch} (one per row, None for a free row), each "
                         "a str of zoo.generation.constraints.grammar; got " + repr(grammars)[:200] + ".")
    if all(g is None for g in grammars):
        return None
    tokenizer = tokenizer or getattr(model, "tokenizer", None) or getattr(getattr(model, "backbone", None),
                                                                          "tokenizer", None)
    if tokenizer is None:
        raise ValueError(f"Constrained decoding reads the vocabulary's text: the {type(model).__name__} carries no "
                         "tokenizer; attach one (model.tokenizer = ...) or pass `tokenizer=`.")
    return Constraints(tokenizer, model.vocabulary_size, stop_token_ids, grammars + [None] * padding)


def _padded(arrays, padding):
    """Each array of a dict of B rows, with `padding` more rows repeating row 0."""
    return {name: np.concatenate([value, value[:1].repeat(padding, axis=0)]) for name, value in arrays.items()}


def _power_of_two(n):
    return 1 << (n - 1).bit_length()


def _function(model, key, cls, *args):
    return compiled.lookup(model, key) or compiled.compile(model, key, cls(*args))


def _budgets(budgets, batch):
    values = np.broadcast_to(np.asarray(budgets), (batch,)) if np.ndim(budgets) == 0 else np.asarray(budgets)
    if values.shape != (batch,) or not all(
        isinstance(b, (int, np.integer)) and not isinstance(b, (bool, np.bool_)) and b >= 1 for b in values.tolist()
    ):
        raise ValueError(f"`max_new_tokens` must be an integer >= 1; got {budgets!r}.")
    return values.astype("int64")


class Request:
    """Checked, right-padded inputs of one cached decoding and the static
    shapes they fix (`shapes` (B, P, L[, S]), `static` the traced
    functions' key)."""

    def __init__(self, model, rows, max_new_tokens, stop_token_ids, source, source_padding_mask, bucket=False,
                 suppress_token_ids=(), first_stage=None):
        if not isinstance(max_new_tokens, (int, np.integer)) or isinstance(max_new_tokens, bool) or max_new_tokens < 1:
            raise ValueError(f"`max_new_tokens` must be an integer >= 1; got {max_new_tokens!r}.")
        self.max_new_tokens = max_new_tokens = int(max_new_tokens)
        self.prompt_lengths = np.array([len(row) for row in rows], dtype="int32")
        longest = int(self.prompt_lengths.max())
        limit = model.max_sequence_length
        if longest + max_new_tokens > limit:
            raise ValueError(
                f"The longest prompt ({longest} tokens) plus max_new_tokens ({max_new_tokens}) is "
                f"{longest + max_new_tokens} positions, more than the model's maximum sequence length "
                f"{limit}; shorten the prompt or ask for at most {max(limit - longest, 0)} new tokens."
            )
        self.stop_token_ids = tuple(stop_token_ids)
        length = longest + max_new_tokens
        if bucket:  # powers of two: a new prompt length reuses a program
            length = min(_power_of_two(max(length, loop.FIRST_STAGE)), limit)
            longest = min(_power_of_two(max(longest, 16)), length)
        ids, mask = prompts.right_pad(rows, length, 0)
        self.arrays = (ids, mask)
        self.shapes = (len(rows), longest, length)
        if model.is_encoder_decoder:
            if source is None:
                raise ValueError(
                    f"{type(model).__name__} is an encoder-decoder: pass the encoder input as `source` "
                    "(and `prompt` as the decoder's start tokens)."
                )
            sources = prompts.as_batch(source, source_padding_mask, "source")
            prompts.check_token_range(sources, model.source_vocabulary_size, "source")
            if len(sources) != len(rows):
                raise ValueError(f"`source` has {len(sources)} sequences but `prompt` has {len(rows)}.")
            source_length = max(len(row) for row in sources)
            if source_length > limit:
                raise ValueError(
                    f"The longest source ({source_length} tokens) is longer than the model's maximum "
                    f"sequence length {limit}."
                )
            if bucket:
                source_length = min(_power_of_two(max(source_length, 16)), limit)
            self.arrays += prompts.right_pad(sources, source_length, 0)
            self.shapes += (source_length,)
        elif source is not None or source_padding_mask is not None:
            raise ValueError(f"{type(model).__name__} is decoder-only and takes no `source`.")
        # What the traced functions depend on (the rest are their array inputs).
        self.static = Static(self.shapes, self.stop_token_ids, loop.stage_lengths(longest, length, first_stage),
                             tuple(suppress_token_ids))


@dataclasses.dataclass(frozen=True)
class Static:
    shapes: tuple  # (B, P, L) or (B, P, L, S)
    stop_token_ids: tuple
    stages: tuple  # cache lengths, see `zoo.generation.loop`
    suppress_token_ids: tuple = ()  # ids never chosen


def check_logprobs(logprobs, vocabulary_size):
    """None (no log-probabilities), or k: each chosen token's
    log-probability and its k likeliest alternatives."""
    if logprobs is None:
        return None
    if not isinstance(logprobs, (int, np.integer)) or isinstance(logprobs, bool) or not 0 <= logprobs <= vocabulary_size:
        raise ValueError(f"`logprobs` must be None or an integer in [0, {vocabulary_size}] (the alternatives to "
                         f"return per token); got {logprobs!r}.")
    return int(logprobs)


def check_stop_tokens(stop_token_ids, vocabulary_size):
    """The sorted tuple of stop ids; a ValueError for one outside the vocabulary."""
    if stop_token_ids is None:
        return ()
    if isinstance(stop_token_ids, (int, np.integer)):
        stop_token_ids = [stop_token_ids]
    ids = tuple(sorted({int(t) for t in stop_token_ids}))
    for t in ids:
        if not 0 <= t < vocabulary_size:
            raise ValueError(f"Stop token id {t} is outside the vocabulary [0, {vocabulary_size}).")
    return ids
