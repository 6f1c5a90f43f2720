"""Beam search with a length penalty, over right-padded prompts of
different lengths.

keras-hub's `BeamSampler` has no length penalty, keeps extending a beam
after its stop token, and, while a longer prompt of the batch is still
being read, adds to a row's scores the log-probabilities of tokens it then
overwrites with the prompt's. This keeps the classic scheme (Wu et al. 2016; tensor2tensor's `beam_search`): K
alive beams expanded to the 2K best candidates, candidates ending in a stop
token move to a set of K finished hypotheses scored
`log_prob / new_tokens ** length_penalty`, and a row is done once no alive
beam can beat its worst finished hypothesis.

Shape letters: B batch, K beams, L prompt plus new tokens, V vocabulary.
"""

import weakref

from keras import ops, tree

from zoo.generation import compiled
from zoo.generation.loop import next_function, prefill, run_in_stages

_NEG = -1e9  # the score of "no hypothesis": finite, so sums never NaN


class BeamSearch:
    """K-beam search; returns every beam, best first.

    Args:
        num_beams: K.
        length_penalty: alpha in `score = log_prob / new_tokens ** alpha`;
            0 ranks by total log-probability, 1 (the default) by the mean
            per token, larger values favour longer outputs.
        temperature: logits are divided by it before the log-softmax.
    """

    def __init__(self, num_beams=4, length_penalty=1.0, temperature=1.0):
        self.num_beams = num_beams
        self.length_penalty = length_penalty
        self.temperature = temperature

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
    ):
        """Search from position `index` (the first one outside the shortest
        prompt) to the end of `prompt`, through the cache `stages` (see
        `zoo.generation.loop`).

        Args:
            next: `next(token_ids (B*K, L), cache, index) -> (logits
                (B*K, V), None, cache)`, the logits for position `index`.
            prompt: (B, L) int32, right-padded prompts followed by padding.
            cache: a nested structure of (B, 2, h, S, k) tensors (the
                prefilled key/value cache, S = stages[0]); repeated here
                once per beam.
            mask: (B, L) bool, True at prompt tokens (which are kept).
            max_new_tokens: each row's own budget after its prompt.

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
            candidates = log_probs[..., None] + unflat(ops.log_softmax(logits, axis=-1))  # (B, K, V)
            top_log_probs, top = ops.top_k(ops.reshape(candidates, (batch, K * vocabulary)), 2 * K)
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

            # Candidates that stopped join the finished set, length-penalised.
            generated = index + 1 - prompt_lengths  # (B,) new tokens, the stop token included
            scores = top_log_probs / self._penalty(generated)[:, None]
            pool_scores = ops.concatenate([finished_scores, ops.where(stopped, scores, _NEG)], axis=1)
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
        alive_scores = log_probs / self._penalty(ops.full_like(prompt_lengths, max_new_tokens))[:, None]
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
        sequences = ops.repeat(prompt[:, None, :], K, axis=1)  # (B, K, L)
        cache = tree.map_structure(lambda x: ops.repeat(x, K, axis=0), cache)
        log_probs = ops.broadcast_to(
            ops.convert_to_tensor([[0.0] + [_NEG] * (K - 1)], "float32"), (batch, K)
        )
        finished = ops.zeros((batch, K, length), "int32")
        finished_scores = ops.full((batch, K), _NEG, "float32")
        done = ops.zeros((batch,), "bool")
        return sequences, cache, log_probs, finished, finished_scores, done

    def _row_done(self, index, log_probs, finished_scores, prompt_lengths, max_new_tokens):
        """(B,) whether no alive beam of a row can still beat the worst of its K finished ones."""
        generated = index - prompt_lengths  # (B,) new tokens so far
        best_alive = ops.max(log_probs, axis=1)  # (B,) log-probs only fall
        bound = ops.maximum(
            best_alive / self._penalty(ops.minimum(generated + 1, max_new_tokens)),
            best_alive / self._penalty(ops.full_like(generated, max_new_tokens)),
        )
        worst_finished = ops.min(finished_scores, axis=1)
        return ops.logical_and(worst_finished > _NEG / 2, worst_finished >= bound)


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
        num_beams, length_penalty, temperature: `BeamSearch`'s.

    Call arguments: as `zoo.generation.loop.Prefill`'s. Returns `(token_ids (B, K, L),
    scores (B, K))`.
    """

    def __init__(self, model, static, num_beams, length_penalty, temperature):
        self._model = weakref.ref(model)
        self.static = static
        self.sampler = BeamSearch(num_beams, length_penalty, temperature)

    @property
    def model(self):
        return self._model()

    def __call__(self, ids, mask, *source):
        compiled.count_trace()
        model, static, num_beams = self.model, self.static, self.sampler.num_beams
        context, cache = prefill(model, static.shapes, static.stages[0], ids, *source)
        if context is not None:
            context = tree.map_structure(lambda x: ops.repeat(x, num_beams, axis=0), context)
        return self.sampler(
            next_function(model, context, static.suppress_token_ids),
            ids,
            cache,
            ops.min(ops.sum(ops.cast(mask, "int32"), axis=1)),
            mask,
            static.max_new_tokens,
            static.stages,
            stop_token_ids=static.stop_token_ids,
        )
