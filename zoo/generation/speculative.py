"""Speculative decoding that keeps the model's distribution (Leviathan et
al. 2023, "Fast Inference from Transformers via Speculative Decoding";
Chen et al. 2023): a cheap proposer guesses the next k tokens, and one
cached pass of the model over them checks all k at once.

    zoo.generate(lm, prompt, max_new_tokens=200, prompt_lookup_num_tokens=10)
    zoo.generate(lm, prompt, max_new_tokens=200, assistant_model=small_lm)

The proposers (transformers' names):
- prompt lookup (`prompt_lookup_num_tokens`, `max_matching_ngram_size`, as
  transformers' `PromptLookupCandidateGenerator`): the last n tokens (n
  from `max_matching_ngram_size` down to 1) are looked up in the row's
  earlier tokens, and the k tokens that followed their first occurrence
  are the guess. A deterministic proposal: its q is one-hot.
- a draft model (`assistant_model`) of the same vocabulary: k tokens drawn
  one by one from its distribution q, through its own cached step
  (`Draft`, one compiled loop).

One round (`rounds`), the row's last token at position t - 1 not yet in
the model's cache:
1. The proposer's k tokens x_t..x_{t+k-1}.
2. `Verify`: the model's `call_with_cache` over the W = k + 1 tokens
   x_{t-1}..x_{t+k-1} at `cache_index` t - 1 (W rounded up to a power of
   two, the extra positions masked out), which gives its distributions
   p_t..p_{t+k}, each after the row's controls and sampler (temperature,
   top-k, top-p; one-hot at the argmax for greedy), as a plain step's.
   Position i's keys and values are written at i; those of rejected
   tokens are stale, but the causal mask over absolute positions hides
   every cache slot past the query's position, and they are overwritten
   when that position is fed again.
3. The acceptance rule: x_j is accepted with probability
   min(1, p_j(x_j) / q_j(x_j)); at the first rejection the token is drawn
   from norm(max(0, p_j - q_j)) instead, and when all k are accepted a
   bonus token is drawn from p_{t+k}. Each new token then has the
   distribution p exactly (Leviathan et al.'s Theorem 1); with greedy
   rows (p and q one-hot) the tokens are greedy decoding's, token for
   token.
4. k adapts as transformers' "heuristic" schedule: + 2 after a round whose
   k tokens were all accepted, - 1 (at least 1) otherwise; "constant"
   keeps it.

The draws come from the row's seed and the position alone, as every
sampler's (`zoo.generation.samplers`): a token drawn from p or from the
residual uses the row's own Gumbel noise at its position; the acceptance
uniforms and the draft model's draws use keys derived from the row's key
(Threefry of a tag), so the three are independent and a seeded run is
reproducible.

One prompt at a time (as transformers' assisted generation), decoder-only
models, within the model's window (past it `zoo.generate` goes on
without speculation).

Shape letters: L the cache's length, W the verified positions (a power of
two, at least k + 1), V vocabulary.
"""

import weakref

import numpy as np
from keras import ops

from zoo.generation import compiled, controls as control_ops, loop, samplers
from zoo.generation.interface import check_model

NAMES = ("assistant_model", "num_assistant_tokens", "num_assistant_tokens_schedule", "prompt_lookup_num_tokens",
         "max_matching_ngram_size")
SCHEDULES = ("heuristic", "constant")
MOST_TOKENS = 63  # the most tokens proposed in a round (W at most 64)
ASSISTANT_TOKENS = 20  # transformers' `num_assistant_tokens`
NGRAM = 2  # transformers' `max_matching_ngram_size`
_DRAFT_TAG, _ACCEPT_TAG = 0x5EC0DE01, 0x5EC0DE02  # derive the draft's and the acceptance's keys from a row's


def settings(kwargs):
    """The speculative decoding settings taken out of `kwargs` (those not None), or None."""
    taken = {name: kwargs.pop(name) for name in NAMES if kwargs.get(name) is not None}
    return taken or None


class Speculation:
    """The checked settings of one speculative decoding, and its counts.

    Args:
        model: the model decoded (decoder-only).
        batch: the rows (1 only).
        assistant_model: a draft model of the same vocabulary, or None.
        num_assistant_tokens: the tokens a draft model proposes in the
            first round (default 20, transformers').
        num_assistant_tokens_schedule: "heuristic" (+2 when all are
            accepted, -1 otherwise; the default with a draft model) or
            "constant" (the default with prompt lookup).
        prompt_lookup_num_tokens: k of prompt lookup, or None.
        max_matching_ngram_size: the longest n-gram prompt lookup matches
            (default 2).

    Attributes:
        num_tokens: the tokens the next round proposes.
        width: the most positions a round verifies: the power of two
            above the first round's tokens (the heuristic grows k up to
            width - 1). Each round runs the narrowest program that holds
            its k + 1 positions (a power of two, at least 2): up to
            log2(width) compiled programs, since on a CPU each position
            verified costs nearly a step's matrix products.
        rounds, drafted, accepted: the verification passes so far, the
            tokens proposed and those accepted.
    """

    def __init__(self, model, batch, assistant_model=None, num_assistant_tokens=None,
                 num_assistant_tokens_schedule=None, prompt_lookup_num_tokens=None, max_matching_ngram_size=None):
        if (assistant_model is None) == (prompt_lookup_num_tokens is None):
            raise ValueError("Speculative decoding takes one proposer: `assistant_model` (a draft model) or "
                             "`prompt_lookup_num_tokens` (n-grams of the context); got "
                             f"{'both' if assistant_model is not None else 'neither'}.")
        if batch != 1:
            raise ValueError(f"Speculative decoding takes one prompt at a time (as transformers' assisted "
                             f"generation); got {batch}.")
        if model.is_encoder_decoder:
            raise ValueError(f"Speculative decoding runs decoder-only models; {type(model).__name__} is an "
                             "encoder-decoder.")
        self.draft = assistant_model
        if assistant_model is not None:
            check_draft(model, assistant_model)
            if max_matching_ngram_size is not None:
                raise ValueError("`max_matching_ngram_size` is prompt lookup's; a draft model takes none.")
            start = ASSISTANT_TOKENS if num_assistant_tokens is None else num_assistant_tokens
            schedule = num_assistant_tokens_schedule or "heuristic"
        else:
            if num_assistant_tokens is not None:
                raise ValueError("`num_assistant_tokens` is a draft model's; prompt lookup proposes "
                                 "`prompt_lookup_num_tokens`.")
            start, schedule = prompt_lookup_num_tokens, num_assistant_tokens_schedule or "constant"
            self.ngram = _count("max_matching_ngram_size", NGRAM if max_matching_ngram_size is None
                                else max_matching_ngram_size, 1, None)
        name = "num_assistant_tokens" if assistant_model is not None else "prompt_lookup_num_tokens"
        self.num_tokens = _count(name, start, 1, MOST_TOKENS)
        self.width = _power_of_two(self.num_tokens + 1)
        if schedule not in SCHEDULES:
            raise ValueError(f"`num_assistant_tokens_schedule` must be one of {', '.join(map(repr, SCHEDULES))}; "
                             f"got {schedule!r}.")
        self.schedule = schedule
        self.rounds = self.drafted = self.accepted = 0

    def propose(self, tokens, k):
        """Prompt lookup's guess of the next `k` tokens after `tokens` (a
        list; possibly fewer, or none)."""
        return prompt_lookup(tokens, k, self.ngram)

    def adapt(self, proposed, accepted):
        """Counts a round and sets the next round's number of tokens."""
        self.rounds += 1
        self.drafted += proposed
        self.accepted += accepted
        if self.schedule == "heuristic" and proposed:
            self.num_tokens = min(self.num_tokens + 2, self.width - 1) if accepted == proposed else max(
                self.num_tokens - 1, 1)

    @property
    def acceptance_rate(self):
        """The share of proposed tokens accepted (0 before any)."""
        return self.accepted / self.drafted if self.drafted else 0.0


def check_draft(model, draft):
    """One clear ValueError for a draft model that cannot propose for `model`."""
    check_model(draft)
    if draft.is_encoder_decoder:
        raise ValueError(f"The draft model is an encoder-decoder ({type(draft).__name__}); a draft is decoder-only.")
    if draft.vocabulary_size != model.vocabulary_size:
        raise ValueError(f"The draft model's vocabulary has {draft.vocabulary_size} tokens, the model's "
                         f"{model.vocabulary_size}; a draft must share the model's tokenizer.")
    ours, theirs = _vocabulary(model), _vocabulary(draft)
    if ours is not None and theirs is not None and ours != theirs:
        first = next(i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b)
        raise ValueError(f"The draft model's tokenizer differs from the model's (token {first} is "
                         f"{theirs[first]!r}, not {ours[first]!r}); a draft must share the model's tokenizer.")


def _vocabulary(model):
    tokenizer = getattr(model, "tokenizer", None) or getattr(getattr(model, "backbone", None), "tokenizer", None)
    if tokenizer is None or not hasattr(tokenizer, "get_vocabulary"):
        return None
    return list(tokenizer.get_vocabulary())


def _count(name, value, least, most):
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < least or (
            most is not None and value > most):
        bound = f"in [{least}, {most}]" if most is not None else f">= {least}"
        raise ValueError(f"`{name}` must be an integer {bound}; got {value!r}.")
    return int(value)


def prompt_lookup(tokens, k, max_ngram):
    """transformers' `PromptLookupCandidateGenerator`: for n from
    `max_ngram` down to 1, the last n of `tokens` are looked for among the
    earlier ones; the up to `k` tokens after the first occurrence that has
    any are the guess ([] if none)."""
    tokens = np.asarray(tokens, "int64")
    length = len(tokens)
    for n in range(min(max_ngram, length - 1), 0, -1):
        windows = np.lib.stride_tricks.sliding_window_view(tokens[:-1], n)  # every n-gram but the last
        hits = np.flatnonzero((windows == tokens[-n:]).all(axis=1))
        for start in hits + n:
            if start < length:
                return tokens[start:start + k].tolist()
    return []


# --- The rounds, on the host ------------------------------------------------------------------

def rounds(decoding):
    """Decodes `decoding`'s one row within the window by speculation,
    yielding after each round the tokens gained (`Decoding.steps`' lists)."""
    model, speculation = decoding.model, decoding.speculation
    prompt = decoding.rows[0]
    length = len(prompt)
    budget_end = length + min(int(decoding.budgets[0]), decoding.request.max_new_tokens)
    draft = speculation.draft
    window = min(model.max_sequence_length, draft.max_sequence_length if draft is not None else np.inf)
    widest = speculation.width
    cache_length = int(min(window, _power_of_two(max(budget_end + widest, loop.FIRST_STAGE))))
    budget_end = min(budget_end, cache_length)  # past a shorter draft's window: the decoding goes on without it
    tokens = np.zeros((1, cache_length), "int32")
    tokens[0, :length] = prompt
    static = decoding._static()[:3]  # the sampling variant, the controls, the log-probabilities (None)
    sampling, controls = decoding.sampling, decoding._controls()
    prompt_lengths = np.array([length], "int32")
    with compiled.held(*[m for m in (model, draft) if m is not None]):  # no variable changes in the loop
        _, cache = _prefill(model, tokens, length, cache_length)
        if draft is not None:
            _, draft_cache = _prefill(draft, tokens, length, cache_length)
            filled = length  # the positions whose keys and values the draft's cache holds right
        end = length  # the row's tokens so far; the last is not in the model's cache yet
        while end < budget_end and not decoding.finished:
            k = min(speculation.num_tokens, budget_end - end - 1, widest - 1)
            guess = speculation.propose(tokens[0, :end], k) if draft is None and k > 0 else []
            if draft is None:
                k = len(guess)
            # The narrowest program that holds the round's tokens: on a CPU each
            # position verified costs nearly a step's products.
            width = max(_power_of_two(k + 1), 2)
            while end - 1 + width > cache_length:
                width //= 2
            k = min(k, width - 1)
            proposal = ()
            if draft is not None and k > 0:
                key = ("draft", width, cache_length, decoding.suppress_token_ids, static)
                propose = compiled.lookup(draft, key) or compiled.compile(
                    draft, key, Draft(draft, width, decoding.suppress_token_ids, *static))
                draft_cache, drafted, proposal = propose.raw(
                    draft_cache, tokens, np.array(min(filled, end - 1), "int32"), np.array(end, "int32"),
                    np.array(k, "int32"), prompt_lengths, sampling, *controls)
                tokens = np.array(ops.convert_to_numpy(drafted))
                proposal = (proposal,)
            elif draft is None and k > 0:
                tokens[0, end:end + k] = guess[:k]
            elif draft is not None:  # no room for a proposal: a plain step, verifying 2 positions
                proposal = (np.zeros((width - 1, model.vocabulary_size), "float32"),)
            looked_up = draft is None
            key = ("verify", width, cache_length, looked_up, decoding.suppress_token_ids, static)
            verify = compiled.lookup(model, key) or compiled.compile(
                model, key, Verify(model, width, looked_up, decoding.suppress_token_ids, *static))
            cache, accepted, token, probability = verify.raw(
                cache, tokens, np.array(end - 1, "int32"), np.array(k, "int32"), prompt_lengths, sampling, *controls,
                *proposal)
            accepted, token = int(ops.convert_to_numpy(accepted)), int(ops.convert_to_numpy(token))
            probability = ops.convert_to_numpy(probability)
            new = tokens[0, end:end + accepted].tolist() + [token]
            tokens[0, end + accepted] = token
            if draft is not None and k > 0:
                filled = min(end + accepted, end + k - 1)
            speculation.adapt(k, accepted)
            gained = [[]]
            for offset, new_token in enumerate(new):
                if decoding.finished:
                    break
                decoding._append(0, new_token, {"probability": probability[offset]}, gained)
            end += len(new)
            yield gained


def _prefill(model, tokens, length, cache_length):
    longest = min(_power_of_two(max(length, 16)), cache_length)
    shapes = (1, longest, cache_length)
    key = ("prefill", shapes, cache_length)
    prefill = compiled.lookup(model, key) or compiled.compile(model, key, loop.Prefill(model, shapes, cache_length))
    return prefill.raw(tokens, tokens > 0)


def _power_of_two(n):
    return 1 << (n - 1).bit_length()


# --- In the compiled functions ----------------------------------------------------------------

def derived_key(key, tag):
    """(B, 2) int32: a key of its own for each row, Threefry of `tag` under the row's `key`."""
    tag = ops.full((key.shape[0], 1), tag, "int32")
    x0, x1 = samplers.threefry2x32((key[:, :1], key[:, 1:]), (tag, tag))
    return ops.concatenate([x0, x1], axis=1)


def uniform(key, position):
    """(B,) uniforms in (0, 1): row r's from Threefry of the counter (position_r, 0) under `key[r]`."""
    position = ops.reshape(ops.cast(position, "int32"), (-1, 1))
    bits, _ = samplers.threefry2x32((key[:, :1], key[:, 1:]), (position, ops.zeros_like(position)))
    high = ops.bitwise_and(ops.right_shift(bits, 8), 0xFFFFFF)
    return (ops.cast(high, "float32")[:, 0] + 0.5) * 2.0**-24


class Distribution:
    """The distribution each row's sampler draws from, as a plain step's
    `loop.Chooser` chooses: the suppressed ids masked out, the controls
    (when on), then the sampler's temperature, top-k and top-p; one-hot at
    the argmax for a greedy row. Call arguments as `Chooser`'s, with
    `sampling` and `controls` the rows'. Returns `(probabilities (B, V),
    tempered logits (B, V), greedy (B,) int32, logits (B, V))`, the logits
    with the suppressed ids masked out alone (a token's probability under
    the model)."""

    def __init__(self, suppress_token_ids, variant, controlled):
        self.suppress_token_ids, self.variant, self.controlled = suppress_token_ids, variant, controlled

    def __call__(self, logits, token_ids, index, prompt_lengths, sampling, controls):
        logits = samplers.suppress(ops.cast(logits, "float32"), self.suppress_token_ids)
        chosen = logits
        if self.controlled:
            temperature = ops.expand_dims(sampling["temperature"], 1)
            chosen = control_ops.apply(logits, token_ids, index, prompt_lengths, controls, temperature)
        greedy = samplers.argmax(chosen)
        one_hot = ops.one_hot(greedy, chosen.shape[-1], dtype="float32")
        sampled, filtered = self.variant
        if not sampled:
            return one_hot, chosen, greedy, logits
        tempered = samplers.tempered(chosen, sampling, filtered)
        drawn = ops.expand_dims(sampling["temperature"] > 0, 1)
        return ops.where(drawn, ops.softmax(tempered, axis=-1), one_hot), tempered, greedy, logits


class _Traced:
    """A traced function of one model, held weakly (as `zoo.generation.loop`'s):
    the compiled functions are cached per model and must not keep it alive."""

    def __init__(self, model):
        self._model = weakref.ref(model)

    @property
    def model(self):
        return self._model()


def _rows(arrays, count):
    """Each (1, ...) array of a dict repeated to `count` rows."""
    return {name: ops.repeat(value, count, axis=0) for name, value in arrays.items()}


class Verify(_Traced):
    """The traced function that checks a round's proposal: one pass of the
    model's cached step over W positions, the acceptance rule, and the
    token that follows the accepted ones.

    Args:
        model: the model (held weakly).
        width: W, the positions fed (k + 1 <= W).
        looked_up: True: a deterministic proposal (q one-hot); False: a
            draft model's, whose q comes as the last argument.
        suppress_token_ids, variant, controlled, logprobs: as
            `loop.Advance`'s (`logprobs` must be None).

    Call arguments:
        cache: the model's cache (L positions), right before `index`;
            written in place on JAX (the caller must not read it again).
        tokens: (1, L) int32, the row's tokens, the k proposed at
            index + 1..index + k.
        index: () int32, t - 1: the position of the row's last token.
        k: () int32, the tokens proposed.
        prompt_lengths: (1,) int32.
        sampling, *controls: the row's arrays, as `Advance`'s.
        q: (W - 1, V) float32, the draft's distributions (not when
            `looked_up`).

    Returns:
        `(cache, accepted () int32, token () int32, probability (W,)
        float32)`: the cache, how many proposed tokens are accepted, the
        token after them, and the model's probability of each of the
        accepted tokens and that one (the rest 0).
    """

    donates_first = True  # the cache, written in place on JAX

    def __init__(self, model, width, looked_up, suppress_token_ids=(), variant=(True, True), controlled=False,
                 logprobs=None):
        super().__init__(model)
        if logprobs is not None:
            raise ValueError("`logprobs` is not recorded with speculative decoding.")
        self.width, self.looked_up = width, looked_up
        self.distribution = Distribution(suppress_token_ids, variant, controlled)
        self.sampled = variant[0]

    def __call__(self, cache, tokens, index, k, prompt_lengths, sampling, *rest):
        compiled.count_trace()
        width, vocabulary = self.width, self.model.vocabulary_size
        controls = rest[0] if self.distribution.controlled else None
        fed = ops.slice(tokens, [0, index], [1, width])  # (1, W): the last token, the proposal, padding
        logits, cache = self.model.call_with_cache(fed, cache, index, None)  # (1, W, V)
        positions = index + 1 + ops.arange(width, dtype="int32")  # (W,) the positions of the distributions
        rows = _rows(sampling, width)
        p, _, _, logits = self.distribution(
            logits[0], ops.repeat(tokens, width, axis=0), positions, ops.repeat(prompt_lengths, width, axis=0), rows,
            None if controls is None else _rows(controls, width))
        proposed = fed[0, 1:]  # (W - 1,)
        q = ops.one_hot(proposed, vocabulary, dtype="float32") if self.looked_up else rest[-1]
        q = ops.concatenate([q, ops.zeros((1, vocabulary), "float32")], axis=0)  # (W, V): none after the last
        p_x = ops.take_along_axis(p[:-1], proposed[:, None], axis=1)[:, 0]  # (W - 1,)
        q_x = ops.take_along_axis(q[:-1], proposed[:, None], axis=1)[:, 0]
        accept_key = derived_key(rows["key"][: width - 1], _ACCEPT_TAG)
        u = uniform(accept_key, positions[:-1])
        ok = ops.logical_and(self.accepts(u, p_x, q_x), ops.arange(width - 1, dtype="int32") < k)
        accepted = ops.sum(ops.cumprod(ops.cast(ok, "int32")))  # the leading accepted tokens
        p_n = ops.take(p, accepted, axis=0)  # (V,)
        q_n = ops.take(q, accepted, axis=0)
        residual = ops.where(accepted < k, ops.maximum(p_n - q_n, 0.0), p_n)
        residual = ops.where(ops.sum(residual) > 0, residual, p_n)  # p = q to rounding: p itself
        scores = ops.where(residual > 0, ops.log(ops.maximum(residual, 1e-30)), -1e30)[None]  # (1, V)
        if self.sampled:
            scores = scores + samplers.gumbel(sampling["key"], ops.take(positions, accepted), vocabulary)
        token = samplers.largest(scores[0])
        chosen = ops.where(ops.arange(width, dtype="int32") < accepted,
                           ops.concatenate([proposed, ops.zeros((1,), "int32")]), token)  # (W,)
        probability = ops.take_along_axis(ops.softmax(logits, axis=-1), chosen[:, None], axis=1)[:, 0]
        probability = ops.where(ops.arange(width, dtype="int32") <= accepted, probability, 0.0)
        return cache, accepted, token, probability

    def accepts(self, u, p_x, q_x):
        """Leviathan et al.'s rule: a draft x is accepted when u < p(x) / q(x)."""
        return u * q_x < p_x

    def what(self, cache, tokens, *rest):
        return f"the speculative verification of {self.width} positions, cache length {tokens.shape[1]}"


class Draft(_Traced):
    """The traced function of a draft model's proposal: its cached step
    fed one position at a time from `start` (where its cache stops being
    right) through the row's last token, then k tokens drawn from its
    distributions (each after the row's controls and sampler, with the
    row's draft key), in one `while_loop`.

    Call arguments: the draft's `cache` (written in place on JAX),
    `tokens` (1, L) int32, `start`, `end` (the row's length), `k` ()
    int32, `prompt_lengths`, `sampling` and `*controls` as `Verify`'s.
    Returns `(cache, tokens with the k drafts at end..end + k - 1, q
    (W - 1, V) float32 their distributions)`.
    """

    donates_first = True  # the cache, written in place on JAX

    def __init__(self, model, width, suppress_token_ids=(), variant=(True, True), controlled=False, logprobs=None):
        super().__init__(model)
        self.width = width
        self.distribution = Distribution(suppress_token_ids, variant, controlled)

    def __call__(self, cache, tokens, start, end, k, prompt_lengths, sampling, *controls):
        compiled.count_trace()
        model, vocabulary, width = self.model, self.model.vocabulary_size, self.width
        controls = controls[0] if self.distribution.controlled else None
        key = derived_key(sampling["key"], _DRAFT_TAG)
        draw = dict(sampling, key=key)
        sampled = self.distribution.variant[0]

        def cond(position, cache, tokens, q):
            return position < end + k - 1

        def body(position, cache, tokens, q):
            fed = ops.slice(tokens, [0, position], [1, 1])
            logits, cache = model.call_with_cache(fed, cache, position, None)
            chosen = position + 1
            probabilities, tempered, greedy, _ = self.distribution(logits[:, 0], tokens, chosen, prompt_lengths,
                                                                   sampling, controls)
            token = greedy
            if sampled:
                drawn = samplers.largest(tempered + samplers.gumbel(key, chosen, vocabulary))
                token = ops.where(draw["temperature"] > 0, drawn, greedy)
            drafting = chosen >= end
            row = ops.clip(chosen - end, 0, width - 2)
            kept = ops.slice(tokens, [0, chosen], [1, 1])
            tokens = ops.slice_update(tokens, [0, chosen], ops.where(drafting, token[:, None], kept))
            q = ops.slice_update(q, [row, 0], ops.where(drafting, probabilities, ops.slice(q, [row, 0], [1, vocabulary])))
            return position + 1, cache, tokens, q

        q = ops.zeros((width - 1, vocabulary), "float32")
        _, cache, tokens, q = ops.while_loop(cond, body, (ops.cast(start, "int32"), cache, tokens, q))
        return cache, tokens, q

    def what(self, cache, tokens, *rest):
        return f"the draft model's proposal of up to {self.width - 1} tokens, cache length {tokens.shape[1]}"
