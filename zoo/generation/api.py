"""`generate_ids` (what `zoo.generate` runs on token ids) and `beam_search`: autoregressive decoding
with a key/value cache for decoder-only and encoder-decoder zoo models.

A model generates through the cached step it owns (see
`zoo.generation.interface`). How a call runs: the arguments are checked
and the prompts padded (`zoo.generation.prompts`), `compiled` traces and
caches the functions of each input shape (`loop.Prefill` and
`loop.Advance`, run by `engine.Decoding`; `beam.BeamSearchLoop`), and in
them:
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

from zoo.generation import compiled, constraints, prompts, samplers, speculative
from zoo.generation.beam import BEAM_FIRST_STAGE, BeamSearchLoop
from zoo.generation.controls import NGRAM_MOST
from zoo.generation.engine import Decoding, Request, check_stop_tokens
from zoo.generation.interface import check_model


@dataclasses.dataclass(frozen=True)
class GenerationOutput:
    """What `zoo.generate` returns on token ids: one sequence per prompt.

    Attributes:
        token_ids: (B, L) int32, each row its prompt, then its new tokens,
            then `pad_token_id`; L = longest prompt + max_new_tokens.
        lengths: (B,) int32, prompt plus new tokens of each row.
        prompt_lengths: (B,) int32.
        sequences: B lists of the new token ids only; a list ends with the
            stop token when one came (what followed it is not returned).
        token_logprobs, top_ids, top_logprobs: with `logprobs` asked, B
            lists, one entry per id of `sequences`: its log-probability
            under the model, and the ids and log-probabilities of its k
            likeliest alternatives (lists of k, the likeliest first); else
            None.
    """

    token_ids: np.ndarray
    lengths: np.ndarray
    prompt_lengths: np.ndarray
    sequences: list
    token_logprobs: list = None
    top_ids: list = None
    top_logprobs: list = None


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


def generate_ids(
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
    top_k=50,
    top_p=0.9,
    num_beams=4,
    length_penalty=1.0,
    pad_token_id=0,
    suppress_token_ids=None,
    min_p=None,
    repetition_penalty=None,
    presence_penalty=None,
    frequency_penalty=None,
    logit_bias=None,
    no_repeat_ngram_size=None,
    logprobs=None,
    assistant_model=None,
    num_assistant_tokens=None,
    num_assistant_tokens_schedule=None,
    prompt_lookup_num_tokens=None,
    max_matching_ngram_size=None,
    json_schema=None,
    regex=None,
    choices=None,
    grammar=None,
    json_object=None,
    **kwargs,
):
    """Continue each prompt by up to `max_new_tokens` tokens: the token-id
    level that `zoo.generate` runs (call that: it takes text too).

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
            temperature)); "top_k" (from the top_k most likely); "top_p" (from
            the smallest set with probability >= top_p, nucleus sampling);
            one for every row, or a list of one a row
            (`zoo.generation.Sampling`); or "beam" (the best of `num_beams`
            beams; `beam_search` returns them all).
        stop_token_ids: ids that end a sequence; the stop token is the last
            one returned.
        seed: an int s: row r draws with seed s + r, and a row's tokens
            are the same alone or in any batch (`generate(m, [p], seed=s +
            r)` is row r of `generate(m, prompts, seed=s)`); a list: one
            seed a row; None: a new seed each call (from NumPy's global
            random state).
        padding_mask: (B, T), True or 1 at the tokens of an array `prompt`.
        source, source_padding_mask: the encoder input of an
            encoder-decoder, in the same forms as `prompt`.
        temperature: > 0; divides the logits (all samplers but greedy).
        top_k: top-k's k, 1 <= top_k <= vocabulary size.
        top_p: top-p's p, in (0, 1]. `temperature`, `top_k` and `top_p`
            are each one value or one a row.
        num_beams, length_penalty: see `beam_search`.
        pad_token_id: fills the padded positions of the returned arrays.
        suppress_token_ids: ids never chosen, by any sampler or beam
            (transformers' single-token `bad_words_ids`: Marian's `<pad>`).
        min_p, repetition_penalty, presence_penalty, frequency_penalty,
            logit_bias, no_repeat_ngram_size: the decoding controls
            (`zoo.generation.controls`), each one value or one a row; not
            with beam search.
        logprobs: None, or k: each new token's log-probability under the
            model (before the sampler's temperature and the controls) and
            its k likeliest alternatives, recorded inside the compiled loop
            (`GenerationOutput.token_logprobs`, ...); not with beam search.
        assistant_model, num_assistant_tokens, num_assistant_tokens_schedule,
            prompt_lookup_num_tokens, max_matching_ngram_size: speculative
            decoding, as transformers' (`zoo.generation.speculative`): a
            draft model of the same vocabulary, or n-grams of the context,
            propose tokens that one pass of the model checks; the tokens
            keep the model's distribution (greedy: the same tokens). One
            prompt at a time; not with beam search or `logprobs`.
        json_schema, regex, choices, grammar, json_object: constrained
            decoding (`zoo.generation.constraints.grammar`): each row's new
            tokens follow a JSON schema (a dict, a JSON str or a pydantic
            model class), match a regular expression, are one of a list of
            str, follow a Lark or GBNF grammar, or are a JSON object; one
            value for every row, or a list of one a row (None: a free row).
            Read through the model's tokenizer; not with beam search.

    Returns:
        A `GenerationOutput`.

    Example:

    ```python
    lm = zoo.build("gpt-nano", task="causal_lm")
    out = zoo.generate(lm, [[1, 2, 3], [4, 5]], max_new_tokens=8, stop_token_ids=[0])
    out.sequences  # two lists of at most 8 new token ids
    ```
    """
    samplers.refuse_renamed(kwargs, "generate_ids")
    controls = {name: value for name, value in dict(
        min_p=min_p, repetition_penalty=repetition_penalty, presence_penalty=presence_penalty,
        frequency_penalty=frequency_penalty, logit_bias=logit_bias, no_repeat_ngram_size=no_repeat_ngram_size,
    ).items() if value is not None}
    speculation = speculative.settings(dict(
        assistant_model=assistant_model, num_assistant_tokens=num_assistant_tokens,
        num_assistant_tokens_schedule=num_assistant_tokens_schedule, prompt_lookup_num_tokens=prompt_lookup_num_tokens,
        max_matching_ngram_size=max_matching_ngram_size))
    beam = isinstance(sampler, str) and sampler == "beam"
    if beam and speculation:
        raise ValueError(f"`{next(iter(speculation))}` (speculative decoding) is not taken by beam search; use a "
                         "sampler.")
    constrained = dict(json_schema=json_schema, regex=regex, choices=choices, grammar=grammar, json_object=json_object)
    if beam and any(value is not None and value is not False for value in constrained.values()):
        raise ValueError("Constrained decoding (`json_schema`, `regex`, `choices`, `grammar`, `json_object`) is not "
                         "taken by beam search; use greedy or a sampler.")
    if beam and controls:
        raise ValueError(f"`{next(iter(controls))}` is not taken by beam search; use a sampler.")
    if beam and logprobs is not None:
        raise ValueError("`logprobs` is not taken by beam search (a beam's tokens change until the end); use a sampler.")
    if beam:
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
            suppress_token_ids=suppress_token_ids,
        )
        return GenerationOutput(
            token_ids=beams.token_ids[:, 0],
            lengths=beams.lengths[:, 0],
            prompt_lengths=beams.prompt_lengths,
            sequences=[row[0] for row in beams.sequences],
        )
    check_model(model)
    sampling = dict(sampler=sampler, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
    grammars = constraints.grammars(len(prompts.as_batch(prompt, padding_mask, "prompt")), **constrained)
    decoding = Decoding(
        model, prompt, max_new_tokens, sampling, stop_token_ids,
        padding_mask=padding_mask, source=source, source_padding_mask=source_padding_mask,
        suppress_token_ids=suppress_token_ids, controls=controls, logprobs=logprobs, constraints=grammars,
        speculation=speculation,
    ).run()
    lengths = decoding.prompt_lengths + np.array([len(new) for new in decoding.new_tokens], "int32")
    token_ids = np.full((len(lengths), int(decoding.prompt_lengths.max()) + max_new_tokens), pad_token_id, "int32")
    for row, (prompt_ids, new) in enumerate(zip(decoding.rows, decoding.new_tokens)):
        token_ids[row, : lengths[row]] = prompt_ids + new
    recorded = (decoding.token_logprobs, decoding.top_ids, decoding.top_logprobs) if logprobs is not None else ()
    return GenerationOutput(token_ids, lengths, decoding.prompt_lengths, decoding.new_tokens, *recorded)


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
    suppress_token_ids=None,
    min_new_tokens=0,
    no_repeat_ngram_size=0,
    early_stopping="never",
    forced_first_token_id=None,
    forced_stop_token_id=None,
    renormalize_logits=False,
):
    """Beam search: the `num_beams` best continuations of each prompt.

    A hypothesis ends at a stop token or after `max_new_tokens` new
    tokens, and is scored `log_prob / new_tokens ** length_penalty`
    (log_prob summed over its new tokens). For an encoder-decoder the
    encoder runs once per prompt and its output is shared by the beams.
    Arguments as `generate_ids`; `num_beams` >= 1. The length controls of
    transformers' beam search (what a checkpoint's generation_config.json
    sets; `zoo.generation.beam.BeamSearch`):

    - `min_new_tokens`: no stop token among the first this many new
      tokens (transformers' `min_length` less the decoder's prompt);
    - `no_repeat_ngram_size`: n in [0, 10]: no beam writes an n-gram it
      already holds, prompt included (0 is off);
    - `early_stopping`: "never" (a row ends once no beam can beat its
      finished ones), True (once it has `num_beams` finished) or False
      (transformers' heuristic, the best beam scored at its length);
    - `forced_first_token_id`, `forced_stop_token_id`: the token a row's
      first new token, and its last budgeted one, must be (transformers'
      `forced_bos_token_id` and `forced_eos_token_id`);
    - `renormalize_logits`: each step's log-probabilities normalized again
      after the suppressed tokens and the controls (transformers'
      `renormalize_logits`; otherwise, as there, they are removed from
      the log-softmax without renormalizing).

    With one beam and `early_stopping=True`, this is greedy decoding under
    those controls.

    Returns:
        A `BeamSearchOutput`, K hypotheses per prompt, best first. With
        one beam and no stop token it is greedy decoding.
    """
    if not isinstance(num_beams, int) or isinstance(num_beams, bool) or num_beams < 1:
        raise ValueError(f"`num_beams` must be a positive integer; got {num_beams!r}.")
    if not isinstance(length_penalty, (int, float)) or isinstance(length_penalty, bool):
        raise ValueError(f"`length_penalty` must be a number; got {length_penalty!r}.")
    samplers.check_temperature(temperature)
    check_model(model)
    length_controls = check_length_controls(min_new_tokens, no_repeat_ngram_size, early_stopping,
                                            forced_first_token_id, forced_stop_token_id, model.vocabulary_size)
    length_controls += (bool(renormalize_logits),)
    batch = prompts.as_batch(prompt, padding_mask, "prompt")
    prompts.check_token_range(batch, model.vocabulary_size, "prompt")
    stop_token_ids = check_stop_tokens(stop_token_ids, model.vocabulary_size)
    suppress_token_ids = samplers.check_suppressed(suppress_token_ids, model.vocabulary_size)
    request = Request(model, batch, max_new_tokens, stop_token_ids, source, source_padding_mask, bucket=True,
                      suppress_token_ids=suppress_token_ids, first_stage=BEAM_FIRST_STAGE)
    if model.vocabulary_size < 2:
        raise ValueError("Beam search needs a vocabulary of at least 2 tokens.")
    config = ("beam", num_beams, float(length_penalty), float(temperature), *length_controls)
    key = (config, request.static)
    run = compiled.lookup(model, key) or compiled.compile(
        model, key, BeamSearchLoop(model, request.static, *config[1:])
    )
    ids, mask, *source = request.arrays
    raw, scores = run(ids, mask, np.array(max_new_tokens, "int32"), *source)
    raw = raw[..., : int(request.prompt_lengths.max()) + max_new_tokens]  # the lengths' bucket cut off
    token_ids, lengths, sequences = prompts.trim(
        raw, request.prompt_lengths, max_new_tokens, request.stop_token_ids, pad_token_id
    )
    return BeamSearchOutput(token_ids, lengths, request.prompt_lengths, sequences, scores)


def check_length_controls(min_new_tokens, no_repeat_ngram_size, early_stopping, forced_first_token_id,
                          forced_stop_token_id, vocabulary):
    """beam_search's length controls, checked, in `BeamSearch`'s order."""
    def count(name, value, most=None):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0 or (most is not None and value > most):
            limit = f"in [0, {most}]" if most is not None else ">= 0"
            raise ValueError(f"`{name}` must be an integer {limit}; got {value!r}.")
        return value

    if not (isinstance(early_stopping, bool) or early_stopping == "never"):
        raise ValueError(f"`early_stopping` must be True, False or \"never\"; got {early_stopping!r}.")
    for name, value in (("forced_first_token_id", forced_first_token_id), ("forced_stop_token_id", forced_stop_token_id)):
        if value is not None:
            count(name, value, vocabulary - 1)
    return (count("min_new_tokens", min_new_tokens), count("no_repeat_ngram_size", no_repeat_ngram_size, NGRAM_MOST),
            early_stopping, forced_first_token_id, forced_stop_token_id)
