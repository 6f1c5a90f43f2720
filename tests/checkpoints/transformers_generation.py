"""transformers' `generate` for an encoder-decoder (version 4.57), re-implemented in float64
NumPy over any function that gives the next token's logits: greedy search and beam search,
with the logits processors a checkpoint's generation_config.json turns on.

- The processors, in transformers' order, on each step's log-softmax (beam search) or logits
  (greedy): `MinLengthLogitsProcessor` (no `</s>` while the decoder holds fewer than
  `min_length` tokens), `NoRepeatNGramLogitsProcessor` (no token that would complete an n-gram
  the row already holds, decoder start included), `NoBadWordsLogitsProcessor` (single-token
  `bad_words_ids` removed, no renormalization), `ForcedBOSTokenLogitsProcessor` (the first new
  token) and `ForcedEOSTokenLogitsProcessor` (`</s>` at position `max_length - 1`); then, with
  `renormalize_logits`, `LogitNormalization` (a log-softmax again).
- Beam search as `GenerationMixin._beam_search`: the 2K best candidates of the K running
  beams; the K best that did not stop run on; those among the K best that stopped (or reached
  `max_length`) join the K finished hypotheses, scored `sum of log-probs / new_tokens **
  length_penalty` (new tokens after the decoder start, the last one included); a row is done
  by `early_stopping` (True: K finished; False: the best running beam, scored at the current
  length, cannot beat the worst finished; "never": nor at `max_length`).
"""

import numpy as np

NEG = -1.0e9


def log_softmax(logits):
    logits = logits - logits.max()
    return logits - np.log(np.exp(logits).sum())


def processed(scores, decoded, settings, max_length):
    """One row's (V,) scores after the processors, `decoded` its decoder tokens so far."""
    scores = np.array(scores, np.float64)
    length, end = len(decoded), settings["eos_token_id"]
    if length < (settings.get("min_length") or 0):
        scores[end] = -np.inf
    n = settings.get("no_repeat_ngram_size") or 0
    if n and length + 1 >= n:
        prefix = tuple(decoded[length - n + 1:])
        for start in range(length - n + 1):
            if tuple(decoded[start:start + n - 1]) == prefix:
                scores[decoded[start + n - 1]] = -np.inf
    for ids in settings.get("bad_words_ids") or ():
        if len(ids) == 1:
            scores[ids[0]] = -np.inf
    forced = [(settings.get("forced_bos_token_id"), length == 1),
              (settings.get("forced_eos_token_id"), length == max_length - 1)]
    for token, now in forced:
        if token is not None and now:
            scores[:] = -np.inf
            scores[token] = 0.0
    return log_softmax(scores) if settings.get("renormalize_logits") else scores


def greedy(next_logits, settings, max_length):
    """transformers' greedy search: the new tokens, `</s>` included."""
    decoded = [settings["decoder_start_token_id"]]
    while len(decoded) < max_length:
        decoded.append(int(np.argmax(processed(next_logits(decoded), decoded, settings, max_length))))
        if decoded[-1] == settings["eos_token_id"]:
            break
    return decoded[1:]


def beam_search(next_logits, settings, max_length, num_beams, length_penalty, early_stopping):
    """transformers' beam search of one source: (the best hypothesis's new tokens, `</s>`
    included where it stopped, and its score)."""
    K, end, prompt_length = num_beams, settings["eos_token_id"], 1
    running = [[settings["decoder_start_token_id"]] for _ in range(K)]
    running_scores = np.array([0.0] + [NEG] * (K - 1))
    finished, finished_scores, is_finished = [None] * K, np.full(K, NEG), np.zeros(K, bool)
    improvable, length = True, 1
    while True:
        candidates = []
        for b in range(K):
            step = processed(log_softmax(next_logits(running[b])), running[b], settings, max_length)
            candidates += [(running_scores[b] + step[v], b, v) for v in range(len(step))]
        top = sorted(candidates, key=lambda c: -c[0])[: 2 * K]
        sequences = [running[b] + [v] for _, b, v in top]
        scores = np.array([s for s, _, _ in top])
        hits = np.array([v == end or length + 1 >= max_length for _, _, v in top])
        keep = np.argsort(-(scores + hits * NEG), kind="stable")[:K]
        running, running_scores = [sequences[i] for i in keep], (scores + hits * NEG)[keep]
        joined = scores / (length + 1 - prompt_length) ** length_penalty
        joined = joined + NEG * (bool(is_finished.all()) and early_stopping is True) + NEG * (not improvable)
        joined = joined + NEG * ~(hits & (np.arange(2 * K) < K))
        merged_scores = np.concatenate([finished_scores, joined])
        best = np.argsort(-merged_scores, kind="stable")[:K]
        merged = finished + sequences
        merged_finished = np.concatenate([is_finished, hits & (np.arange(2 * K) < K)])
        finished, finished_scores, is_finished = [merged[i] for i in best], merged_scores[best], merged_finished[best]
        length += 1
        hypothetical = (max_length if early_stopping == "never" and length_penalty > 0 else length) - prompt_length
        worst = np.where(is_finished, finished_scores.min(), NEG)
        improvable = improvable and bool(np.any(running_scores[0] / hypothetical ** length_penalty > worst))
        if not improvable or (is_finished.all() and early_stopping is True) or hits.all():
            return finished[0][1:], float(finished_scores[0])
