"""Beam search with a length penalty, over right-padded prompts of
different lengths.

keras-hub's `BeamSampler` has no length penalty, keeps extending a beam
after its stop token, and, while a longer prompt of the batch is still
being read, adds to a row's scores the log-probabilities of tokens it then
overwrites with the prompt's. This keeps the classic scheme (Wu et al. 2016; tensor2tensor's `beam_search`): K
alive beams expanded to the 2K best candidates, candidates ending in a stop
token move to a set of K finished hypotheses scored
`log_prob / new_tokens ** length_penalty`, and a row is done once no alive
beam can beat its worst finished hypothesis (or, as transformers'
`early_stopping` asks, once it has K finished hypotheses, or once the
best alive beam scored at its current length cannot).

The length controls of transformers' beam search, applied to each beam's
log-probabilities: a stop token is not chosen among the first
`min_new_tokens` (`MinLengthLogitsProcessor`); no beam repeats an n-gram
of its own tokens, prompt included (`NoRepeatNGramLogitsProcessor`); a
row's first new token is a given one (`ForcedBOSTokenLogitsProcessor`,
BART's `<s>`), and its last budgeted one a stop token
(`ForcedEOSTokenLogitsProcessor`). With one beam and `early_stopping`
True this is greedy decoding under those controls.

Shape letters: B batch, K beams, L prompt plus new tokens, V vocabulary.
"""

import weakref

from keras import ops, tree

from zoo import kernels
from zoo.generation import compiled, samplers
from zoo.generation.controls import repeated_ngram_ends
from zoo.generation.loop import describe_shapes, next_function, prefill, run_in_stages

_NEG = -1e9  # the score of "no hypothesis": finite, so sums never NaN
# The first cache stage's length. Each step reorders every beam's whole
# cache stage (read and written once), so short stages pay: K beams of
# 16 positions, not 64, while the first tokens are decoded.
BEAM_FIRST_STAGE = 16


class BeamSearch:
    """K-beam search; returns every beam, best first.

    Args:
        num_beams: K.
        length_penalty: alpha in `score = log_prob / new_tokens ** alpha`;
            0 ranks by total log-probability, 1 (the default) by the mean
            per token, larger values favour longer outputs.
        temperature: logits are divided by it before the log-softmax.
        min_new_tokens: no stop token among a row's first this many new
            tokens.
        no_repeat_ngram_size: n in [0, controls.NGRAM_MOST]: no beam writes an
            n-gram it already holds (0 is off).
        early_stopping: when a row is done: "never" (the default), once no
            alive beam can beat its worst finished hypothesis at any length
            the budget allows; True, once it has K finished hypotheses;
            False, once the best alive beam, scored at its current length,
            cannot beat the worst finished one (transformers' heuristic).
        forced_first_token_id: None, or the token a row's first new token
            must be.
        forced_stop_token_id: None, or the token a row's last budgeted new
            token must be.
        renormalize_logits: the log-probabilities normalized again after
            the suppressed tokens and the controls are removed
            (transformers' `renormalize_logits`, Marian's setting).
    """

    def __init__(self, num_beams=4, length_penalty=1.0, temperature=1.0, min_new_tokens=0,
                 no_repeat_ngram_size=0, early_stopping="never", forced_first_token_id=None,
                 forced_stop_token_id=None, renormalize_logits=False):
        self.num_beams = num_beams
        self.length_penalty = length_penalty
        self.temperature = temperature
        self.min_new_tokens = min_new_tokens
        self.no_repeat_ngram_size = no_repeat_ngram_size
        self.early_stopping = early_stopping
        self.forced_first_token_id = forced_first_token_id
        self.forced_stop_token_id = forced_stop_token_id
        self.renormalize_logits = renormalize_logits

    def _penalty(self, new_tokens):
        new_tokens = ops.maximum(ops.cast(new_tokens, "float32"), 1.0)
        return ops.power(new_tokens, self.length_penalty)

    def __call__(
        self,
        next,
        prompt,
        cache,
        index,
        mask,
        max_new_tokens,
        stages,
        stop_token_ids=None,
        suppress_token_ids=(),
    ):
        """Search from position `index` (the first one outside the shortest
        prompt) to the end of `prompt`, through the cache `stages` (see
        `zoo.generation.loop`).

        Args:
            next: `next(token_ids (B*K, L), cache, index) -> (logits
                (B*K, V), None, cache)`, the logits for position `index`.
            prompt: (B, L) int32, right-padded prompts followed by padding.
            cache: a nested structure of (B, h, S, k) tensors (the
                prefilled key/value cache, S = stages[0]); repeated here
                once per beam.
            mask: (B, L) bool, True at prompt tokens (which are kept).
            max_new_tokens: each row's own budget after its prompt (an
                int, or a () int32 tensor: one program serves every budget).
            suppress_token_ids: ids never chosen (removed after the
                log-softmax, as transformers' `bad_words_ids`: the other
                tokens' log-probabilities are not renormalized).

        Returns:
            `(token_ids (B, K, L), scores (B, K))`, best first.
        """
        K = self.num_beams
        batch, length = prompt.shape[0], prompt.shape[1]
        index = ops.cast(index, "int32")
        mask = ops.cast(mask, "bool")
        prompt_lengths = ops.sum(ops.cast(mask, "int32"), axis=1)  # (B,)
        budget_end = prompt_lengths + max_new_tokens  # (B,) first position past the budget
        positions = ops.arange(length, dtype="int32")
        beam_range = ops.arange(K, dtype="int32")

        def flat(x):  # (B, K, ...) -> (B*K, ...)
            return ops.reshape(x, (batch * K,) + tuple(x.shape[2:]))

        def unflat(x):  # (B*K, ...) -> (B, K, ...)
            return ops.reshape(x, (batch, K) + tuple(x.shape[1:]))

        sequences, cache, log_probs, finished, finished_scores, done = self._start(prompt, cache)

        def cond(index, cache, sequences, log_probs, finished, finished_scores, done):
            return ops.logical_not(ops.all(ops.logical_or(done, index >= budget_end)))

        def body(index, cache, sequences, log_probs, finished, finished_scores, done):
            logits, _, cache = next(flat(sequences), cache, index)
            logits = ops.cast(logits, "float32") / self.temperature
            vocabulary = logits.shape[-1]
            step_log_probs = self._controlled(ops.log_softmax(logits, axis=-1), flat(sequences), index,
                                              repeat_rows(prompt_lengths, K), repeat_rows(budget_end, K), stop_token_ids,
                                              suppress_token_ids)
            candidates = log_probs[..., None] + unflat(step_log_probs)  # (B, K, V)
            top_log_probs, top = kernels.top_k(ops.reshape(candidates, (batch, K * vocabulary)), 2 * K)
            source_beam = top // vocabulary  # (B, 2K)
            tokens = top % vocabulary
            extended = _gather(sequences, source_beam)  # (B, 2K, L)
            at_index = positions[None, None, :] == index
            extended = ops.where(at_index, tokens[..., None], extended)
            stopped = _is_stop(tokens, stop_token_ids)

            # The K best candidates that did not stop stay alive.
            new_log_probs, alive = ops.top_k(ops.where(stopped, _NEG, top_log_probs), K)
            new_sequences = _gather(extended, alive)
            new_source = ops.take_along_axis(source_beam, alive, axis=1)  # (B, K)

            # Candidates among the K best that stopped join the finished set, length-penalised.
            generated = index + 1 - prompt_lengths  # (B,) new tokens, the stop token included
            scores = top_log_probs / self._penalty(generated)[:, None]
            joins = ops.logical_and(stopped, ops.arange(2 * K)[None, :] < K)
            pool_scores = ops.concatenate([finished_scores, ops.where(joins, scores, _NEG)], axis=1)
            pool = ops.concatenate([finished, extended], axis=1)  # (B, 3K, L)
            new_finished_scores, best = ops.top_k(pool_scores, K)
            new_finished = _gather(pool, best)

            # Rows inside their prompt, past their budget, or done stay as they are.
            frozen = ops.logical_or(ops.logical_or(mask[:, index], index >= budget_end), done)
            keep = frozen[:, None]
            sequences = ops.where(keep[..., None], sequences, new_sequences)
            log_probs = ops.where(keep, log_probs, new_log_probs)
            finished = ops.where(keep[..., None], finished, new_finished)
            finished_scores = ops.where(keep, finished_scores, new_finished_scores)
            if K > 1:
                source = ops.where(keep, beam_range[None, :], new_source)
                cache = tree.map_structure(lambda x: flat(_gather(unflat(x), source)), cache)
            index = index + 1
            finished_rows = self._row_done(index, log_probs, finished_scores, prompt_lengths, max_new_tokens)
            done = ops.logical_or(done, finished_rows)
            return index, cache, sequences, log_probs, finished, finished_scores, done

        state = (sequences, log_probs, finished, finished_scores, done)
        _, _, state = run_in_stages(cond, body, index, cache, state, stages)
        sequences, log_probs, finished, finished_scores, done = state
        # Alive beams that ran to the budget are complete hypotheses too.
        alive_scores = log_probs / self._penalty(ops.zeros_like(prompt_lengths) + max_new_tokens)[:, None]
        alive_scores = ops.where(done[:, None], _NEG, alive_scores)
        scores, best = ops.top_k(ops.concatenate([finished_scores, alive_scores], axis=1), K)
        token_ids = _gather(ops.concatenate([finished, sequences], axis=1), best)
        return token_ids, scores

    def _start(self, prompt, cache):
        """The search's first state: every row's K beams (the prompt, the
        cache repeated per beam), only the first alive (the others are its
        copies), and no finished hypothesis."""
        K = self.num_beams
        batch, length = prompt.shape[0], prompt.shape[1]
        sequences = ops.broadcast_to(prompt[:, None, :], (batch, K, length))  # (B, K, L)
        cache = tree.map_structure(lambda x: repeat_rows(x, K), cache)
        log_probs = ops.broadcast_to(
            ops.convert_to_tensor([[0.0] + [_NEG] * (K - 1)], "float32"), (batch, K)
        )
        finished = ops.zeros((batch, K, length), "int32")
        finished_scores = ops.full((batch, K), _NEG, "float32")
        done = ops.zeros((batch,), "bool")
        return sequences, cache, log_probs, finished, finished_scores, done

    def _controlled(self, step_log_probs, sequences, index, prompt_lengths, budget_end, stop_token_ids,
                    suppress_token_ids):
        """(B*K, V) log-probabilities of the next token with the suppressed
        tokens and the length controls applied (a removed token at _NEG,
        as transformers' -inf after its log-softmax); sequences (B*K, L),
        the rest (B*K,)."""
        step_log_probs = samplers.suppress(step_log_probs, suppress_token_ids)
        removed = ops.full_like(step_log_probs, _NEG)
        tokens = ops.arange(step_log_probs.shape[-1], dtype="int32")[None, :]  # (1, V)
        stops = _is_stop(tokens, stop_token_ids)  # (1, V)
        if self.min_new_tokens:
            early = (index - prompt_lengths < self.min_new_tokens)[:, None]  # (B*K, 1)
            step_log_probs = ops.where(ops.logical_and(early, stops), removed, step_log_probs)
        if self.no_repeat_ngram_size:
            sizes = ops.full((sequences.shape[0],), self.no_repeat_ngram_size, "int32")
            repeated = repeated_ngram_ends(sequences, index, sizes, step_log_probs.shape[-1])
            step_log_probs = ops.where(repeated, removed, step_log_probs)
        for forced_id, position in ((self.forced_first_token_id, prompt_lengths),
                                    (self.forced_stop_token_id, budget_end - 1)):
            if forced_id is not None:
                forced = ops.where(tokens == forced_id, 0.0, _NEG)  # (1, V)
                step_log_probs = ops.where((index == position)[:, None], forced, step_log_probs)
        return ops.log_softmax(step_log_probs, axis=-1) if self.renormalize_logits else step_log_probs

    def _row_done(self, index, log_probs, finished_scores, prompt_lengths, max_new_tokens):
        """(B,) whether a row is done, as `early_stopping` says."""
        worst_finished = ops.min(finished_scores, axis=1)
        full = worst_finished > _NEG / 2  # K finished hypotheses
        if self.early_stopping is True:
            return full
        generated = index - prompt_lengths  # (B,) new tokens so far
        best_alive = ops.max(log_probs, axis=1)  # (B,) log-probs only fall
        if self.early_stopping is False:
            bound = best_alive / self._penalty(generated)
        else:
            bound = ops.maximum(
                best_alive / self._penalty(ops.minimum(generated + 1, max_new_tokens)),
                best_alive / self._penalty(ops.zeros_like(generated) + max_new_tokens),
            )
        return ops.logical_and(full, worst_finished >= bound)


def _gather(x, indices):
    """x (B, K', ...), indices (B, M) -> (B, M, ...): each row's entries at its indices."""
    for _ in range(len(x.shape) - 2):
        indices = indices[..., None]
    return ops.take_along_axis(x, indices, axis=1)


def _is_stop(tokens, stop_token_ids):
    """Whether each token is one of `stop_token_ids`."""
    hit = ops.zeros_like(tokens, dtype="bool")
    for stop in stop_token_ids or ():
        hit = ops.logical_or(hit, ops.equal(tokens, stop))
    return hit


class BeamSearchLoop:
    """The traced function of one `beam_search` configuration: the
    prefill, then `BeamSearch` (each row's context shared by its beams).

    Args:
        model: the model (held weakly).
        static: the request's traced shapes, stop tokens and cache stages
            (`zoo.generation.engine.Static`).
        settings: `BeamSearch`'s arguments (num_beams, length_penalty,
            temperature, min_new_tokens, no_repeat_ngram_size,
            early_stopping, forced_first_token_id, forced_stop_token_id,
            renormalize_logits).

    Call arguments: `ids`, `mask` as `zoo.generation.loop.Prefill`'s, then
    `max_new_tokens` () int32, then `*source`. Returns `(token_ids (B, K, L),
    scores (B, K))`.
    """

    def __init__(self, model, static, *settings):
        self._model = weakref.ref(model)
        self.static = static
        self.sampler = BeamSearch(*settings)

    @property
    def model(self):
        return self._model()

    def what(self, *arrays):
        return f"beam search ({self.sampler.num_beams} beams) for {describe_shapes(self.static.shapes)}"

    def __call__(self, ids, mask, max_new_tokens, *source):
        compiled.count_trace()
        model, static, num_beams = self.model, self.static, self.sampler.num_beams
        context, cache = prefill(model, static.shapes, static.stages[0], ids, *source)
        if context is not None:
            context = tree.map_structure(lambda x: repeat_rows(x, num_beams), context)
        return self.sampler(
            next_function(model, context),
            ids,
            cache,
            ops.min(ops.sum(ops.cast(mask, "int32"), axis=1)),
            mask,
            max_new_tokens,
            static.stages,
            stop_token_ids=static.stop_token_ids,
            suppress_token_ids=static.suppress_token_ids,
        )


def repeat_rows(x, k):
    """`ops.repeat(x, k, axis=0)` of a tensor of static shape: (N, ...) ->
    (N * k, ...), each row k times in a row, as one broadcast and a reshape
    (TensorFlow's `repeat` traces some 30 operations, and beam search
    repeats every cache and context tensor)."""
    shape = tuple(x.shape)
    return ops.reshape(ops.broadcast_to(ops.expand_dims(x, 1), (shape[0], k, *shape[1:])), (shape[0] * k, *shape[1:]))
