"""Continuous batching: a fixed number of decoding slots that requests
join and leave at any step (JetStream's prefill -> insert -> generate).

    slots = Slots(lm, max_batch=4, stop_token_ids=[2])
    first = slots.add([5, 6, 7], budget=16, sampling=dict(sampler="top_p", seed=0))
    while slots.busy:
        for request, tokens in slots.step():  # the tokens each request gained in this step
            ...
        if wanted:
            slots.add([8, 9], budget=8)  # joins the running batch at the next step
    first.new_tokens, first.finish_reason

Each slot has its own rows of one key/value cache, its own position, its
sampler, seed and decoding controls (`zoo.generation.samplers.Sampling`
and `zoo.generation.controls.Controls` arrays, one row a slot), and its
budget. A request is prefilled alone (`PrefillChunk`: the prompt but its
last token, in chunks of bucketed lengths) into a cache of its own, then
inserted into a free slot (`Insert`); every step then runs one compiled
`SlotStep` for all slots, each row at its own position (the model's
cached step takes a (B,) `cache_index`), empty slots masked by the host.
A finished or cancelled request frees its slot at once.

A request may follow a grammar (`zoo.generation.constraints`: a JSON
schema, a regular expression, choices): its slot's row of the packed
bitmask of allowed tokens is written by its own llguidance matcher
before each step, and the step removes the disallowed tokens' logits
for the constrained slots alone (one program for any grammars; free
slots untouched).

What `zoo.generate` holds holds here: a row's draw at a position comes
from its seed and that position alone, and the first new token's logits
come from a one-token step on the prompt's last token, as in the engine's
loop, so a request gets the tokens it would get from `zoo.generate` alone
(up to the rounding of batch shapes), whichever requests decode beside it.

An encoder-decoder's request carries its source: its prefill first
encodes it (`Encode`: `model.start` at the source's length rounded up to
a power of two, at least 16, as `zoo.generate` rounds it), and the
context this gives (each block's cross-attention keys and values, the
source's padding mask) is inserted into the slots' context beside the
request's keys and values. The slots' source length S grows by doubling
as their cache's length does, zero-padded, the padding mask off there.
Its prompt is the decoder's start tokens, `zoo.generate`'s `prompt`
beside a `source`.

Two further savings:
- chunked prefill (`prefill_chunk`): a long prompt is prefilled one chunk
  of that many tokens per `step`, between decoding steps, so that the
  running requests keep gaining a token each step;
- prefix caching (`prefix_cache_tokens`): the keys and values of a
  prompt's first positions, in blocks of `block_tokens`, each keyed by
  the hash chain of the token ids up to its end (vLLM's automatic prefix
  caching), kept in a least-recently-used cache of at most that many
  tokens, and copied into a new request's cache instead of computed
  (decoder-only models).

Shape letters: B slots, L the slots' cache length, C a prefill chunk,
S the slots' source length (an encoder-decoder), V vocabulary.
"""

import collections
import hashlib

import numpy as np
from keras import backend, ops, tree

from zoo.generation import compiled, loop, prompts, samplers
from zoo.generation.constraints import Constraints
from zoo.generation.controls import Controls
from zoo.generation.interface import check_model

STOP, LENGTH = "stop", "length"
SOURCE_BUCKET = 16  # the shortest source length encoded, as `zoo.generate` rounds a source


class SlotRequest:
    """One request in `Slots`: what it asked and what it gained.

    Attributes:
        prompt: its token ids (an encoder-decoder's: the decoder's start);
            `budget` the most new tokens.
        source: an encoder-decoder's source ids, else None.
        new_tokens, probabilities: its new tokens so far, and the model's
            probability of each.
        finish_reason: `STOP` (a stop token, or `Slots.finish`), `LENGTH`
            (the budget, or the model's window), or None.
        cached_tokens: how many prompt positions came from the prefix cache.
        slot: its slot while it decodes, else None.
        constraint: its one row's `Constraints` (its grammar), or None.
        error: why it was stopped (its grammar cannot go on), or None.
    """

    def __init__(self, prompt, budget, sampling, controls, constraint=None, source=None):
        self.prompt, self.budget, self.source = list(prompt), budget, source
        self.sampling, self.controls, self.constraint = sampling, controls, constraint
        self.error = None
        self.new_tokens, self.probabilities = [], []
        self.finish_reason = None
        self.cached_tokens = 0
        self.slot = None
        self.prefilled = 0  # prompt positions whose keys and values are in `cache`
        self.cache = None  # its own (1, ..., L) cache while it is prefilled
        self.context = None  # an encoder-decoder's encoded source, at the slots' S, until it is inserted

    @property
    def finished(self):
        return self.finish_reason is not None


class Slots:
    """Decodes requests in `max_batch` slots, each joining at any step.

    Args:
        model: a model with a cached step (`zoo.generation.interface`):
            decoder-only, or an encoder-decoder (each request then with
            its `source`).
        max_batch: B, the slots.
        stop_token_ids: ids that end a request (kept as its last token).
        prefill_chunk: None prefills a prompt whole (its length rounded up
            to a power of two), or C: at most C positions per `step`.
        prefix_cache_tokens: the most prompt positions kept in the prefix
            cache; 0 keeps none (and an encoder-decoder takes none).
        block_tokens: the positions of one prefix-cache block.
        tokenizer: the tokenizer whose tokens a constrained request's
            grammar reads (`zoo.generation.constraints.vocabulary`); the
            model's own when None.
        suppress_token_ids: ids never chosen (Marian's `<pad>`), as
            `zoo.generate`'s.

    Attributes:
        prefix_cache: the `PrefixCache`, or None.
    """

    def __init__(self, model, max_batch=8, stop_token_ids=(), *, prefill_chunk=None, prefix_cache_tokens=0,
                 block_tokens=16, tokenizer=None, suppress_token_ids=()):
        check_model(model)
        for name, value, least in (("max_batch", max_batch, 1), ("prefix_cache_tokens", prefix_cache_tokens, 0),
                                   ("block_tokens", block_tokens, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ValueError(f"`{name}` must be an integer >= {least}; got {value!r}.")
        if prefill_chunk is not None and (not isinstance(prefill_chunk, int) or prefill_chunk < 1):
            raise ValueError(f"`prefill_chunk` must be a positive integer or None; got {prefill_chunk!r}.")
        if model.is_encoder_decoder and prefix_cache_tokens:
            raise ValueError(f"{type(model).__name__} is an encoder-decoder: its decoder's prompt is its start tokens, "
                             "so there is no prompt prefix to cache; pass prefix_cache_tokens=0.")
        self.model, self.batch = model, max_batch
        self.stop_token_ids = tuple(sorted({int(t) for t in stop_token_ids or ()}))
        self.prefill_chunk = prefill_chunk
        self.prefix_cache = PrefixCache(block_tokens, prefix_cache_tokens) if prefix_cache_tokens else None
        self.suppress_token_ids = samplers.check_suppressed(suppress_token_ids, model.vocabulary_size)
        self.window = model.max_sequence_length
        self.length = min(loop.FIRST_STAGE, self.window)  # L, grown by doubling
        self.encoder_decoder = bool(model.is_encoder_decoder)
        self.source_length = min(SOURCE_BUCKET, self.window)  # S, grown by doubling
        self.context = None  # the slots' (B, ...) context (an encoder-decoder), made at the first insertion
        self.cache = model.empty_cache(max_batch, self.length)
        self.token_ids = np.zeros((max_batch, self.length), "int32")  # each slot's prompt and new tokens
        self.position = np.zeros(max_batch, "int32")  # each slot's last token's position
        self.prompt_lengths = np.zeros(max_batch, "int32")
        self.sampling = samplers.Sampling(max_batch, model.vocabulary_size).arrays()  # greedy
        self.controls = Controls(max_batch, model.vocabulary_size).arrays()  # off
        self.controlled = np.zeros(max_batch, bool)
        self.tokenizer = tokenizer
        self.bitmask = None  # (B, W) int32, each constrained slot's allowed tokens; made by the first grammar
        self.constrained = np.zeros(max_batch, bool)
        self.requests = [None] * max_batch  # each slot's request
        self.waiting = collections.deque()  # added, not yet in a slot

    @property
    def busy(self):
        """Whether a request waits or decodes."""
        return bool(self.waiting) or any(r is not None for r in self.requests)

    @property
    def in_use(self):
        return sum(r is not None for r in self.requests)

    def add(self, prompt, budget, sampling=None, controls=None, constraint=None, source=None):
        """Queues a request (it is prefilled and inserted by the next
        `step`s); returns its `SlotRequest`. `sampling` and `controls`: one
        row's settings of `Sampling` and `Controls`; `constraint`: the
        grammar its tokens follow (`zoo.generation.constraints.grammar`'s
        str), or None; `source`: an encoder-decoder's source ids (its
        `prompt` the decoder's start). A prompt plus budget past the
        model's window, or a grammar no token can begin, is refused."""
        prompt = [int(t) for t in prompt]
        if not prompt:
            raise ValueError("A prompt needs at least one token.")
        if not all(0 <= t < self.model.vocabulary_size for t in prompt):
            raise ValueError(f"A prompt's token ids must be in [0, {self.model.vocabulary_size}).")
        if not isinstance(budget, (int, np.integer)) or isinstance(budget, bool) or budget < 1:
            raise ValueError(f"`budget` must be an integer >= 1; got {budget!r}.")
        if len(prompt) + budget > self.window:
            raise ValueError(f"The prompt ({len(prompt)} tokens) plus the budget ({budget}) is more than the "
                             f"model's window of {self.window} positions.")
        source = self._checked_source(source)
        row_sampling = samplers.Sampling(1, self.model.vocabulary_size, **(sampling or {}))
        row_controls = Controls(1, self.model.vocabulary_size, **(controls or {}))
        request = SlotRequest(prompt, int(budget), row_sampling, row_controls, self._constraint(constraint), source)
        self.waiting.append(request)
        return request

    def _checked_source(self, source):
        """An encoder-decoder's source ids as a list (None for a decoder-only model), checked."""
        name = type(self.model).__name__
        if not self.encoder_decoder:
            if source is not None:
                raise ValueError(f"{name} is decoder-only and takes no `source`.")
            return None
        if source is None:
            raise ValueError(f"{name} is an encoder-decoder: a request needs its `source` (the encoder's token ids), "
                             "its `prompt` the decoder's start tokens.")
        source = [int(t) for t in source]
        if not source:
            raise ValueError("A source needs at least one token.")
        if not all(0 <= t < self.model.source_vocabulary_size for t in source):
            raise ValueError(f"A source's token ids must be in [0, {self.model.source_vocabulary_size}).")
        if len(source) > self.window:
            raise ValueError(f"The source ({len(source)} tokens) is longer than the model's window of {self.window} "
                             "positions.")
        return source

    def _constraint(self, grammar):
        """One row's `Constraints` of `grammar`, or None without one."""
        if grammar is None:
            return None
        if not isinstance(grammar, str):
            raise ValueError("`constraint` must be a grammar (a str of zoo.generation.constraints.grammar) or None; "
                             f"got {type(grammar).__name__}.")
        tokenizer = self.tokenizer or getattr(self.model, "tokenizer", None)
        if tokenizer is None:
            raise ValueError(f"Constrained decoding reads the vocabulary's text: the {type(self.model).__name__} "
                             "carries no tokenizer; attach one (model.tokenizer = ...) or pass `tokenizer=`.")
        constraint = Constraints(tokenizer, self.model.vocabulary_size, self.stop_token_ids, [grammar])
        if self.bitmask is None:
            self.bitmask = np.full((self.batch, constraint.bitmask.shape[1]), -1, "int32")
        return constraint

    def finish(self, request):
        """Ends `request` now (cancelled, or a stop string came): its slot is free at once."""
        if request.finish_reason is None:
            request.finish_reason = STOP
        self._release(request)

    def step(self):
        """Prefills (one chunk with `prefill_chunk`, else the next waiting
        prompt whole), inserts what is prefilled into free slots, then one
        decoding step for every slot. Returns `[(request, tokens gained)]`
        of the requests that gained tokens or finished."""
        for request in [r for r in self.waiting if r.finished]:
            self.waiting.remove(request)
        self._prefill()
        while self.waiting and self._ready(self.waiting[0]) and None in self.requests:
            self._insert(self.waiting.popleft())
        if all(r is None for r in self.requests):
            return []
        return self._decode()

    # --- Prefill ----------------------------------------------------------------------

    def _ready(self, request):
        return request.cache is not None and request.prefilled >= len(request.prompt) - 1

    def _prefill(self):
        """The next chunk of the first waiting request not prefilled yet
        (its whole prompt without `prefill_chunk`)."""
        request = next((r for r in self.waiting if not self._ready(r)), None)
        if request is None:
            return
        end = len(request.prompt) - 1  # the last prompt token is the first decoding step's input
        if request.cache is None:
            self._grow(len(request.prompt) + request.budget)
            if request.source is not None:
                self._encode(request)
            request.cache, request.prefilled = self._start_cache(request)
            if self._ready(request):
                return
        # The rest whole (or at most `prefill_chunk` of it), its length bucketed to a power of
        # two: a few programs, and a short rest (a prompt after its cached prefix) costs little.
        chunk = min(max(_power_of_two(end - request.prefilled), 16), self.prefill_chunk or self.length, self.length)
        while True:
            # A chunk of C positions ending inside the prompt: the last one overlaps the positions
            # before it (their keys and values computed again, the same) rather than run past L.
            start = max(0, min(request.prefilled, end - chunk))
            ids = np.zeros((1, chunk), "int32")
            piece = request.prompt[start:start + chunk][: max(end - start, 0)]
            ids[0, : len(piece)] = piece
            function = _function(self.model, ("slot prefill", chunk, self.length), PrefillChunk, self.model)
            request.cache = function.raw(request.cache, ids, np.array(start, "int32"), request.context)
            request.prefilled = min(start + chunk, end)
            if self._ready(request):
                self._remember(request)
                return
            if self.prefill_chunk is not None:
                return

    def _encode(self, request):
        """The request's context: its source encoded at its length's bucket
        (a power of two, at least 16, at most the window: a few programs),
        zero-padded to the slots' source length, grown first if shorter."""
        bucket = min(_power_of_two(max(len(request.source), SOURCE_BUCKET)), self.window)
        self._grow_source(bucket)
        ids, mask = prompts.right_pad([request.source], bucket, 0)
        function = _function(self.model, ("slot encode", bucket, self.source_length), Encode, self.model,
                             self.source_length)
        request.context = function.raw(ids, mask)

    def _grow_source(self, needed):
        """The slots' source length at least `needed` (doubling, at most the
        window): their context and the waiting requests' contexts
        zero-padded, the padding mask off there."""
        if needed <= self.source_length:
            return
        length = self.source_length
        while length < needed:
            length = min(2 * length, self.window)
        if self.context is not None:
            self.context = grow_context(self.context, length)
        for request in self.waiting:
            if request.context is not None:
                request.context = grow_context(request.context, length)
        self.source_length = length

    def _start_cache(self, request):
        """The request's own (1, ..., L) cache: its cached prefix blocks
        copied in, or zeros. Returns `(cache, positions filled)`."""
        empty = self.model.empty_cache(1, self.length)
        if self.prefix_cache is None:
            return empty, 0
        blocks = self.prefix_cache.lookup(request.prompt[:-1])
        if not blocks:
            return empty, 0
        filled = len(blocks) * self.prefix_cache.block_tokens
        arrays = [np.zeros(x.shape, _numpy_dtype(x)) for x in tree.flatten(empty)]
        for b, block in enumerate(blocks):
            at = slice(b * self.prefix_cache.block_tokens, (b + 1) * self.prefix_cache.block_tokens)
            for layer, values in zip(arrays, block):
                layer[0, ..., at, :] = values
        request.cached_tokens = filled
        return tree.pack_sequence_as(empty, [ops.convert_to_tensor(a) for a in arrays]), filled

    def _remember(self, request):
        """The prefilled request's whole blocks into the prefix cache."""
        if self.prefix_cache is not None:
            self.prefix_cache.store(request.prompt[:-1], request.cache)

    # --- Insert and decode ------------------------------------------------------------

    def _insert(self, request):
        slot = self.requests.index(None)
        self.requests[slot], request.slot = request, slot
        prompt = request.prompt
        function = _function(self.model, ("slot insert", self.batch, self.length), Insert, self.model)
        self.cache = function.raw(self.cache, request.cache, np.array(slot, "int32"))
        request.cache = None
        if request.context is not None:  # an encoder-decoder's context, beside its keys and values
            if self.context is None:
                self.context = tree.map_structure(lambda x: ops.zeros((self.batch, *x.shape[1:]), x.dtype),
                                                  request.context)
            key = ("slot context insert", self.batch, self.source_length)
            self.context = _function(self.model, key, Insert, self.model).raw(self.context, request.context,
                                                                               np.array(slot, "int32"))
            request.context = None
        self.token_ids[slot] = 0
        self.token_ids[slot, : len(prompt)] = prompt
        self.position[slot] = len(prompt) - 1
        self.prompt_lengths[slot] = len(prompt)
        for name, values in request.sampling.arrays().items():
            self.sampling[name][slot] = values[0]
        for name, values in request.controls.arrays().items():
            self.controls[name][slot] = values[0]
        self.controlled[slot] = request.controls.active
        if request.constraint is not None:
            self.bitmask[slot] = request.constraint.bitmask[0]
            self.constrained[slot] = True

    def _release(self, request):
        if request.slot is not None:
            self.requests[request.slot] = None
            self.controlled[request.slot] = False
            self.constrained[request.slot] = False
            request.slot = None
        if request in self.waiting:
            self.waiting.remove(request)
        request.cache = request.context = None

    def _decode(self):
        controlled, constrained = bool(self.controlled.any()), bool(self.constrained.any())
        variant = self._variant()
        key = ("slot step", self.batch, self.length, variant, controlled, constrained, self.suppress_token_ids)
        function = _function(self.model, key, SlotStep, self.model, variant, controlled, constrained,
                             self.suppress_token_ids)
        cache, tokens, probabilities = function.raw(self.cache, self.context, self.token_ids, self.position,
                                                    self.prompt_lengths, self.sampling,
                                                    *((self.controls,) if controlled else ()),
                                                    *((self.bitmask, self.constrained) if constrained else ()))
        self.cache = cache
        tokens, probabilities = ops.convert_to_numpy(tokens), ops.convert_to_numpy(probabilities)
        gained = []
        for slot, request in enumerate(self.requests):
            if request is None:
                continue
            token = int(tokens[slot])
            self.position[slot] += 1
            self.token_ids[slot, self.position[slot]] = token
            request.new_tokens.append(token)
            request.probabilities.append(float(probabilities[slot]))
            if self._consume(request, token):
                request.finish_reason = STOP
            elif token in self.stop_token_ids:
                request.finish_reason = STOP
            elif len(request.new_tokens) >= request.budget:
                request.finish_reason = LENGTH
            gained.append((request, [token]))
            if request.finished:
                self._release(request)
        return gained

    def _consume(self, request, token):
        """Advances a constrained request's grammar by `token` and writes
        its slot's next mask; True when it has ended (its grammar is
        complete, or cannot go on: then `request.error` says why)."""
        if request.constraint is None:
            return False
        try:
            ended = request.constraint.consume(0, token)
        except (ValueError, RuntimeError) as error:  # this request's grammar alone stops
            request.error = error
            return True
        self.bitmask[request.slot] = request.constraint.bitmask[0]
        return ended

    def _variant(self):
        """`Sampling.variant` of the slots in use: greedy slots alone compile
        the argmax alone (each variant chooses the same tokens)."""
        used = np.array([r is not None for r in self.requests])
        sampled = bool((self.sampling["temperature"][used] > 0).any())
        filtered = bool((self.sampling["top_k"][used] < self.model.vocabulary_size).any()
                        or (self.sampling["top_p"][used] < 1).any())
        return sampled, sampled and filtered

    def _grow(self, needed):
        """The slots' cache at least `needed` positions long (doubling, at most the window)."""
        if needed <= self.length:
            return
        length = self.length
        while length < needed:
            length = min(2 * length, self.window)
        self.cache = _function(self.model, ("grow", (self.batch,), length), loop.Grow, self.model, length).raw(
            self.cache)
        self.token_ids = np.pad(self.token_ids, [(0, 0), (0, length - self.length)])
        for request in self.waiting:  # a prefill under way grows with the slots
            if request.cache is not None:
                request.cache = loop.grow_cache(request.cache, length)
        self.length = length


class SlotStep(loop._ModelFunction):
    """The traced decoding step of every slot: each slot's last token at
    its own position through the model's cached step, then its sampler's
    token after it (the engine's `loop.Chooser`: the controls, when on,
    then `samplers.choose`, the draw's counter the new token's position).

    Call arguments: `cache` the slots' (B, ..., L) cache, `context` an
    encoder-decoder's (B, ...) context (else None), `token_ids` (B, L)
    int32 each slot's tokens so far, `position` (B,) int32 each slot's
    last token's position, `prompt_lengths` (B,) int32, `sampling` the
    dict of `Sampling.arrays()` (B rows), (when `controlled`) the dict
    of `Controls.arrays()`, and (when `constrained`) the (B, W) int32
    packed bitmask of allowed tokens and the (B,) bool flags of the
    constrained slots (`zoo.generation.constraints.apply`). Returns `(cache, tokens (B,) int32,
    probabilities (B,) float32)`.
    """

    donates_first = True  # the cache, written in place on JAX

    def __init__(self, model, variant, controlled, constrained=False, suppress_token_ids=()):
        super().__init__(model)
        self.chooser = loop.Chooser(suppress_token_ids, variant, controlled, constrained)

    def __call__(self, cache, context, token_ids, position, prompt_lengths, sampling, *rest):
        compiled.count_trace()
        last = ops.take_along_axis(token_ids, position[:, None], axis=1)  # (B, 1)
        logits, cache = self.model.call_with_cache(last, cache, position, context)  # (B, 1, V)
        token, logits = self.chooser.given(sampling, rest)(logits[:, 0], token_ids, position + 1, prompt_lengths)
        return cache, token, loop.record(logits, token)["probability"]

    def what(self, cache, context, token_ids, *rest):
        return f"the slots' decoding step for {token_ids.shape[0]} slots, cache length {token_ids.shape[1]}"


class PrefillChunk(loop._ModelFunction):
    """The traced prefill of one chunk of a request's prompt: (1, C) ids
    at positions start.. written to its own (1, ..., L) cache. Call
    arguments: `cache`, `ids`, `start` () int32, `context` an
    encoder-decoder's (1, ...) context (else None). Returns the cache."""

    donates_first = True  # the cache, written in place on JAX

    def __call__(self, cache, ids, start, context):
        compiled.count_trace()
        _, cache = self.model.call_with_cache(ids, cache, start, context)
        return cache

    def what(self, cache, ids, start, context):
        return f"the slots' prefill of {ids.shape[1]} positions, cache length {tree.flatten(cache)[0].shape[-2]}"


class Encode(loop._ModelFunction):
    """The traced encoding of a request's source: (1, S') ids and padding
    mask through the encoder-decoder's `start`, its context zero-padded to
    the slots' source length S (`grow_context`). Returns the context."""

    def __init__(self, model, length):
        super().__init__(model)
        self.length = length

    def __call__(self, source_ids, source_padding_mask):
        compiled.count_trace()
        return grow_context(self.model.start(source_ids, source_padding_mask), self.length)

    def what(self, source_ids, source_padding_mask):
        return f"the slots' encoding of a source of {source_ids.shape[1]} positions, source length {self.length}"


def grow_context(context, length):
    """An encoder-decoder's context with its source positions zero-padded to
    `length`: axis 1 of a (B, S) mask, the axis before the last of a
    (B, h, S, k) tensor
    (`zoo.generation.interface`). Zeros in the mask hide the new positions."""

    def pad(x):
        axis = 1 if len(x.shape) == 2 else len(x.shape) - 2
        extra = length - x.shape[axis]
        if extra == 0:
            return x
        shape = list(x.shape)
        shape[axis] = extra
        return ops.concatenate([x, ops.zeros(shape, x.dtype)], axis=axis)

    return tree.map_structure(pad, context)


class Insert(loop._ModelFunction):
    """The traced insertion of a prefilled request's (1, ...) rows into slot
    `slot` of the slots' (B, ...) tensors: its (1, ..., L) cache into the
    slots' cache, or an encoder-decoder's (1, ...) context into theirs.
    Returns the slots' tensors."""

    donates_first = True  # the cache, written in place on JAX

    def __call__(self, cache, row, slot):
        compiled.count_trace()
        return tree.map_structure(
            lambda whole, one: ops.slice_update(whole, [slot] + [0] * (len(whole.shape) - 1), ops.cast(one, whole.dtype)),
            cache, row)

    def what(self, cache, row, slot):
        return f"the insertion of a request into {tree.flatten(cache)[0].shape[0]} slots"


class PrefixCache:
    """The keys and values of prompts' first positions, in blocks of
    `block_tokens`, least recently used first out past `capacity_tokens`.

    A block is keyed by a hash chain: the SHA-256 of the previous block's
    key and the block's token ids, so that a key names every token up to
    the block's end (vLLM's automatic prefix caching). A block holds, per
    cache tensor, its (2, g, block, k) positions.

    Attributes:
        entries: the blocks by key, the least recently used first.
        hits, misses: blocks found and not found by `lookup`.
    """

    def __init__(self, block_tokens, capacity_tokens):
        self.block_tokens, self.capacity_tokens = block_tokens, capacity_tokens
        self.entries = collections.OrderedDict()
        self.hits = self.misses = 0

    @property
    def tokens(self):
        return len(self.entries) * self.block_tokens

    def keys(self, token_ids):
        """The hash-chain keys of the whole blocks of `token_ids`."""
        keys, previous = [], b""
        for end in range(self.block_tokens, len(token_ids) + 1, self.block_tokens):
            block = np.asarray(token_ids[end - self.block_tokens:end], "int64").tobytes()
            previous = hashlib.sha256(previous + block).digest()
            keys.append(previous)
        return keys

    def lookup(self, token_ids):
        """The cached blocks of the longest cached prefix of `token_ids`, first first."""
        found = []
        for key in self.keys(token_ids):
            if key not in self.entries:
                break
            self.entries.move_to_end(key)
            found.append(self.entries[key])
        self.hits += len(found)
        self.misses += len(self.keys(token_ids)) - len(found)
        return found

    def store(self, token_ids, cache):
        """The whole blocks of `token_ids`' positions in `cache` (a request's
        (1, ..., L) cache, those positions filled) not cached yet."""
        keys = self.keys(token_ids)
        if not keys or self.capacity_tokens < self.block_tokens:
            return
        arrays = None
        for b, key in enumerate(keys):
            if key in self.entries:
                self.entries.move_to_end(key)
                continue
            if arrays is None:
                arrays = [ops.convert_to_numpy(x) for x in tree.flatten(cache)]
            at = slice(b * self.block_tokens, (b + 1) * self.block_tokens)
            self.entries[key] = [np.array(layer[0, ..., at, :]) for layer in arrays]
            while self.tokens > self.capacity_tokens:
                self.entries.popitem(last=False)


def _numpy_dtype(x):
    return np.dtype(backend.standardize_dtype(x.dtype))


def _power_of_two(n):
    return 1 << max(int(n) - 1, 0).bit_length()


def _function(model, key, cls, *args):
    return compiled.lookup(model, key) or compiled.compile(model, key, cls(*args))
