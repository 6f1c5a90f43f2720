"""`zoo.generation.generate` and `zoo.generation.beam_search`: autoregressive decoding
with a key/value cache for decoder-only and encoder-decoder zoo models.

A model generates through the cached step it owns (see
`zoo.generation.interface`). How a call runs: this module checks the
arguments and pads the prompts (`zoo.generation.prompts`), `compiled` traces
and caches one function per input shape (`loop.SamplingLoop`,
`beam.BeamSearchLoop`), and inside it:
1. (encoder-decoder) `model.start` runs the encoder once on the source
   and projects each decoder block's cross-attention keys and values once.
2. `model.call_with_cache` on the right-padded prompts fills the
   self-attention cache in one pass.
3. A `while_loop` then feeds one position per step through
   `model.call_with_cache` (`index` is the position whose logits are
   computed): each block writes that position's keys and values into its
   cache in place (`ops.slice_update`) and attends to the positions before
   it.
   Inside a row's prompt the prompt token is kept, after it the sampler's
   token is written, so every row sees exactly the positions it would see
   if it were generated alone (keras-hub's scheme: right padding, one
   absolute position per token). The loop runs in stages of a growing
   cache (`zoo.generation.loop`), so that early steps do not read the
   whole cache.

The samplers, their names and the checks of their settings are
`zoo.generation.samplers`; beam search is `zoo.generation.beam.BeamSearch`.

Shape letters: B batch, P longest prompt, L = P + max_new_tokens, S longest
source, K beams.
"""

import dataclasses

import numpy as np

from zoo.generation import compiled, loop, prompts, samplers
from zoo.generation.beam import BeamSearchLoop
from zoo.generation.interface import check_model


@dataclasses.dataclass(frozen=True)
class GenerationOutput:
    """What `generate` returns: one sequence per prompt.

    Attributes:
        token_ids: (B, L) int32, each row its prompt, then its new tokens,
            then `pad_token_id`; L = longest prompt + max_new_tokens.
        lengths: (B,) int32, prompt plus new tokens of each row.
        prompt_lengths: (B,) int32.
        sequences: B lists of the new token ids only; a list ends with the
            stop token when one came (what followed it is not returned).
    """

    token_ids: np.ndarray
    lengths: np.ndarray
    prompt_lengths: np.ndarray
    sequences: list


@dataclasses.dataclass(frozen=True)
class BeamSearchOutput:
    """What `beam_search` returns: K hypotheses per prompt, best first.

    Attributes:
        token_ids: (B, K, L) int32, as `GenerationOutput.token_ids` per beam.
        lengths: (B, K) int32.
        prompt_lengths: (B,) int32.
        sequences: B lists of K lists of new token ids.
        scores: (B, K) float32, `log_prob / new_tokens ** length_penalty`.
    """

    token_ids: np.ndarray
    lengths: np.ndarray
    prompt_lengths: np.ndarray
    sequences: list
    scores: np.ndarray


def generate(
    model,
    prompt,
    max_new_tokens,
    sampler="greedy",
    stop_token_ids=None,
    seed=None,
    *,
    padding_mask=None,
    source=None,
    source_padding_mask=None,
    temperature=1.0,
    k=50,
    p=0.9,
    num_beams=4,
    length_penalty=1.0,
    pad_token_id=0,
):
    """Continue each prompt by up to `max_new_tokens` tokens.

    Args:
        model: a model with a cached step (`zoo.generation.interface`):
            a decoder-only language model (`zoo.build("gpt-nano",
            task="causal_lm")`) or an encoder-decoder
            (`zoo.build("transformer-tiny")`).
        prompt: B token-id sequences, as a list of lists of different
            lengths, or a (B, T) array with `padding_mask`. For an
            encoder-decoder, the decoder's start (e.g. [[bos]] * B).
        max_new_tokens: the most new tokens per sequence, >= 1.
        sampler: "greedy"; "temperature" (sample from softmax(logits /
            temperature)); "top_k" (from the k most likely); "top_p" (from
            the smallest set with probability >= p, nucleus sampling);
            "beam" (the best of `num_beams` beams; `beam_search` returns
            them all).
        stop_token_ids: ids that end a sequence; the stop token is the last
            one returned.
        seed: an int makes sampling reproducible; None draws a new one
            each call.
        padding_mask: (B, T), True or 1 at the tokens of an array `prompt`.
        source, source_padding_mask: the encoder input of an
            encoder-decoder, in the same forms as `prompt`.
        temperature: > 0; divides the logits (all samplers but greedy).
        k: top-k's k, 1 <= k <= vocabulary size.
        p: top-p's p, in (0, 1].
        num_beams, length_penalty: see `beam_search`.
        pad_token_id: fills the padded positions of the returned arrays.

    Returns:
        A `GenerationOutput`.

    Example:

    ```python
    lm = zoo.build("gpt-nano", task="causal_lm")
    out = zoo.generation.generate(lm, [[1, 2, 3], [4, 5]], max_new_tokens=8, stop_token_ids=[0])
    out.sequences  # two lists of at most 8 new token ids
    ```
    """
    samplers.check_name(sampler)
    if sampler == "beam":
        beams = beam_search(
            model,
            prompt,
            max_new_tokens,
            num_beams=num_beams,
            length_penalty=length_penalty,
            stop_token_ids=stop_token_ids,
            padding_mask=padding_mask,
            source=source,
            source_padding_mask=source_padding_mask,
            temperature=temperature,
            pad_token_id=pad_token_id,
        )
        return GenerationOutput(
            token_ids=beams.token_ids[:, 0],
            lengths=beams.lengths[:, 0],
            prompt_lengths=beams.prompt_lengths,
            sequences=[row[0] for row in beams.sequences],
        )
    request = _Request(model, prompt, max_new_tokens, stop_token_ids, padding_mask, source, source_padding_mask)
    config = samplers.sampler_config(sampler, temperature, k, p, model.vocabulary_size)
    key = (config, request.static)
    run = compiled.lookup(model, key) or compiled.compile(model, key, loop.SamplingLoop(model, request.static, config))
    samplers.reset_seed(run.sampler, seed)
    (raw,) = run(*request.arrays)
    token_ids, lengths, sequences = prompts.trim(
        raw, request.prompt_lengths, max_new_tokens, request.stop_token_ids, pad_token_id
    )
    return GenerationOutput(token_ids, lengths, request.prompt_lengths, sequences)


def beam_search(
    model,
    prompt,
    max_new_tokens,
    num_beams=4,
    length_penalty=1.0,
    stop_token_ids=None,
    *,
    padding_mask=None,
    source=None,
    source_padding_mask=None,
    temperature=1.0,
    pad_token_id=0,
):
    """Beam search: the `num_beams` best continuations of each prompt.

    A hypothesis ends at a stop token or after `max_new_tokens` new
    tokens, and is scored `log_prob / new_tokens ** length_penalty`
    (log_prob summed over its new tokens). For an encoder-decoder the
    encoder runs once per prompt and its output is shared by the beams.
    Arguments as `generate`; `num_beams` >= 1.

    Returns:
        A `BeamSearchOutput`, K hypotheses per prompt, best first. With
        one beam and no stop token it is greedy decoding.
    """
    if not isinstance(num_beams, int) or isinstance(num_beams, bool) or num_beams < 1:
        raise ValueError(f"`num_beams` must be a positive integer; got {num_beams!r}.")
    if not isinstance(length_penalty, (int, float)) or isinstance(length_penalty, bool):
        raise ValueError(f"`length_penalty` must be a number; got {length_penalty!r}.")
    samplers.check_temperature(temperature)
    request = _Request(model, prompt, max_new_tokens, stop_token_ids, padding_mask, source, source_padding_mask)
    if model.vocabulary_size < 2:
        raise ValueError("Beam search needs a vocabulary of at least 2 tokens.")
    config = ("beam", num_beams, float(length_penalty), float(temperature))
    key = (config, request.static)
    run = compiled.lookup(model, key) or compiled.compile(
        model, key, BeamSearchLoop(model, request.static, *config[1:])
    )
    raw, scores = run(*request.arrays)
    token_ids, lengths, sequences = prompts.trim(
        raw, request.prompt_lengths, max_new_tokens, request.stop_token_ids, pad_token_id
    )
    return BeamSearchOutput(token_ids, lengths, request.prompt_lengths, sequences, scores)


class _Request:
    """Checked, padded inputs of one call and the static shapes they fix."""

    def __init__(self, model, prompt, max_new_tokens, stop_token_ids, padding_mask, source, source_padding_mask):
        check_model(model)
        if not isinstance(max_new_tokens, (int, np.integer)) or isinstance(max_new_tokens, bool) or max_new_tokens < 1:
            raise ValueError(f"`max_new_tokens` must be an integer >= 1; got {max_new_tokens!r}.")
        self.max_new_tokens = max_new_tokens = int(max_new_tokens)
        batch = prompts.as_batch(prompt, padding_mask, "prompt")
        prompts.check_token_range(batch, model.vocabulary_size, "prompt")
        self.prompt_lengths = np.array([len(row) for row in batch], dtype="int32")
        longest = int(self.prompt_lengths.max())
        limit = model.max_sequence_length
        if longest + max_new_tokens > limit:
            raise ValueError(
                f"The longest prompt ({longest} tokens) plus max_new_tokens ({max_new_tokens}) is "
                f"{longest + max_new_tokens} positions, more than the model's maximum sequence length "
                f"{limit}; shorten the prompt or ask for at most {max(limit - longest, 0)} new tokens."
            )
        self.stop_token_ids = _stop_tokens(stop_token_ids, model.vocabulary_size)
        length = longest + max_new_tokens
        ids, mask = prompts.right_pad(batch, length, 0)
        self.arrays = (ids, mask)
        self.shapes = (len(batch), longest, length)
        if model.is_encoder_decoder:
            if source is None:
                raise ValueError(
                    f"{type(model).__name__} is an encoder-decoder: pass the encoder input as `source` "
                    "(and `prompt` as the decoder's start tokens)."
                )
            sources = prompts.as_batch(source, source_padding_mask, "source")
            prompts.check_token_range(sources, model.source_vocabulary_size, "source")
            if len(sources) != len(batch):
                raise ValueError(f"`source` has {len(sources)} sequences but `prompt` has {len(batch)}.")
            source_length = max(len(row) for row in sources)
            if source_length > limit:
                raise ValueError(
                    f"The longest source ({source_length} tokens) is longer than the model's maximum "
                    f"sequence length {limit}."
                )
            self.arrays += prompts.right_pad(sources, source_length, 0)
            self.shapes += (source_length,)
        elif source is not None or source_padding_mask is not None:
            raise ValueError(f"{type(model).__name__} is decoder-only and takes no `source`.")
        # What the traced function depends on (the rest are its array inputs).
        self.static = _Static(self.shapes, self.stop_token_ids, max_new_tokens, loop.stage_lengths(longest, length))


@dataclasses.dataclass(frozen=True)
class _Static:
    shapes: tuple  # (B, P, L) or (B, P, L, S)
    stop_token_ids: tuple
    max_new_tokens: int
    stages: tuple  # cache lengths, see `zoo.generation.loop`


def _stop_tokens(stop_token_ids, vocabulary_size):
    if stop_token_ids is None:
        return ()
    if isinstance(stop_token_ids, (int, np.integer)):
        stop_token_ids = [stop_token_ids]
    ids = tuple(sorted({int(t) for t in stop_token_ids}))
    for t in ids:
        if not 0 <= t < vocabulary_size:
            raise ValueError(f"Stop token id {t} is outside the vocabulary [0, {vocabulary_size}).")
    return ids
