"""Text generation: `zoo.generate` and `zoo.stream` on text, and
`TextGeneration`, the one way text enters the decoding engine
(`zoo.generation.Decoding`): `zoo.generate`, `zoo.stream`, `zoo serve` and
`zoo explore` all decode through it, so they pick the same tokens for the
same seed.

    lm = zoo.load("runs/gpt_char/model.keras")  # a GPTCausalLM with its CharTokenizer
    zoo.generate(lm, "ROMEO:", max_length=300, sampler="top_k", top_k=40, seed=0)  # str
    for piece in zoo.stream(lm, "ROMEO:", max_new_tokens=300):  # the same text, piece by piece
        print(piece, end="")

Shape letters: B prompts, W the model's window (its `max_sequence_length`).
"""

import dataclasses
import inspect

import numpy as np

from zoo.tokenizers import token_id_lists
from zoo.generation import constraints, samplers, speculative
from zoo.generation.controls import NAMES as CONTROLS
from zoo.generation.api import generate_ids
from zoo.generation.engine import Decoding, check_stop_tokens
from zoo.models import CausalLM, DecoderStack, EncoderDecoder
from zoo.text.tokens import (
    AUTO,
    auto_stop_ids,
    check_not_empty,
    decode,
    is_auto,
    is_text,
    sampled_decoding,
    special_id,
    tokenizer_of,
)


def generate(
    model,
    prompt,
    max_new_tokens=None,
    sampler="greedy",
    stop_token_ids=AUTO,
    seed=None,
    *,
    max_length=None,
    temperature=1.0,
    top_k=50,
    top_p=0.9,
    stop=None,
    logprobs=None,
    **kwargs,
):
    """Continue text, or token ids, with a decoder-only model; answer text
    with an encoder-decoder.

    On text (a str or a list of str) the model's tokenizer encodes the
    prompts and decodes the result, and generation goes on past the
    model's window W as nanoGPT's `sample.py` does: every new token is
    predicted from the last W tokens at most. Up to W tokens come from the
    cached loop on token ids; each token after that from
    one forward pass over the last W tokens (a fixed (B, W) shape, so it
    compiles once). `zoo.stream` gives the same text in pieces as it comes.

    An `EncoderDecoder` (Marian, BART, T5 / Flan-T5, a translate run) takes
    text too: each prompt is a source, read by its source tokenizer, and
    the result is the decoder's text alone, from the checkpoint's decoder
    start to its end token (greedy is `zoo.translate` with `num_beams=1`);
    its beam search is `zoo.translate`'s.

    On token ids (a list of lists or a (B, T) array) it runs the cached
    loop alone (`zoo.generation.api.generate_ids`) and returns a
    `zoo.generation.GenerationOutput`: the prompts, padded, then the new
    tokens of each, with their lengths.

    Args:
        model: a causal LM (`GPTCausalLM`, `LlamaCausalLM`) or its backbone, or for text an
            `EncoderDecoder`; for text it must carry a tokenizer (`model.tokenizer`).
        prompt: a str, a list of str, or token ids.
        max_new_tokens: the most new tokens per prompt (required for token
            ids; for text, give this or `max_length`).
        sampler: "greedy", "temperature", "top_k", "top_p" (one, or a list
            of one a prompt) or "beam" (beam search only within the model's
            window W).
        stop_token_ids: ids that end a sequence. `"auto"`: for text, the
            tokenizer's end tokens if it has them (`end_token_ids` of a
            `HuggingFaceTokenizer`, else `end_token_id`, e.g. GPT-2's
            `<|endoftext|>`, `[END]` of a `WordTokenizer`), none for a
            `CharTokenizer`; for token ids, none. On text the stop token
            ends the text and is not part of it.
        seed: an int makes sampling reproducible (the same seed, the same
            text): prompt r draws with seed + r, and a prompt's text is the
            same alone or among others (it is `zoo.generate(model,
            prompts[r], seed=seed + r)`); a list: one seed a prompt; None: a
            new seed each call (from NumPy's global random state).
        max_length: for text, the most tokens of prompt plus continuation,
            as keras-hub's `CausalLM.generate`.
        temperature, top_k, top_p: the samplers' settings (greedy reads
            none; `temperature` divides the logits, `top_k` is top-k's k,
            `top_p` top-p's p), each one value or one a prompt. The former
            names `k` and `p` are refused.
        stop: for text, stop strings (a str or a list of str): the new
            text ends before the first one it contains, as OpenAI's `stop`.
        logprobs: None, or k: also return each new token's log-probability
            under the model (its distribution before the sampler's
            temperature and the controls) and its k likeliest
            alternatives, recorded inside the compiled loop (OpenAI's
            `logprobs`; 0 for the chosen tokens' alone). On text the result
            is then a `GeneratedText` per prompt; on token ids the
            `GenerationOutput` carries them. Not with sampler="beam".
        **kwargs: the decoding controls (`min_p`, `repetition_penalty`,
            `presence_penalty`, `frequency_penalty`, `logit_bias`: see
            `zoo.generation.controls`; each one value, or one a prompt),
            constrained decoding (`json_schema`, `regex`, `choices`,
            `grammar`, `json_object`: the new text follows a JSON schema,
            matches a regular expression, is one of a list of str, follows
            a Lark or GBNF grammar, or is a JSON object; see
            `zoo.generation.constraints.grammar`; each one value, or one a
            prompt, None for a free one; not with sampler="beam"), and on
            token ids what the token-id loop takes (`num_beams`,
            `length_penalty`, `padding_mask`, ...).

    Returns:
        For a str, the str of prompt and continuation (the tokenizer's
        decoding of the prompt, then of the new ids), or with `logprobs` a
        `GeneratedText`; for a list of str, a list of them; for token ids,
        a `zoo.generation.GenerationOutput`.

    Example:

    ```python
    import zoo
    from zoo.tokenizers import CharTokenizer

    tokenizer = CharTokenizer.from_text("ROMEO: JULIET: abcdefghijklmnopqrstuvwxyz\\n")
    lm = zoo.build("gpt-nano", "causal_lm", vocabulary_size=tokenizer.vocabulary_size(), tokenizer=tokenizer)
    text = zoo.generate(lm, "ROMEO:", max_length=100, sampler="top_k", top_k=5, seed=0)  # 100 characters
    ```
    """
    samplers.refuse_renamed({name: kwargs[name] for name in samplers.RENAMED if name in kwargs}, "zoo.generate")
    if is_text(prompt):
        return _generate_text(
            model, prompt, max_new_tokens, max_length, sampler, stop_token_ids, seed, temperature, top_k, top_p, stop,
            logprobs, kwargs,
        )
    if max_length is not None:
        raise ValueError(
            "`max_length` counts the tokens of a text prompt and its continuation; for token-id prompts "
            "pass `max_new_tokens`."
        )
    if stop is not None:
        raise ValueError("`stop` strings end a text prompt's continuation; for token-id prompts pass `stop_token_ids`.")
    if max_new_tokens is None:
        raise ValueError("zoo.generate on token ids needs `max_new_tokens`, the most new tokens per prompt.")
    return generate_ids(
        model,
        prompt,
        max_new_tokens,
        sampler=sampler,
        stop_token_ids=None if is_auto(stop_token_ids) else stop_token_ids,
        seed=seed,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        logprobs=logprobs,
        **kwargs,
    )


def stream(model, prompt, *args, skip_prompt=False, **kwargs):
    """Yield the text of `zoo.generate` in pieces, as its tokens are chosen.

    The pieces, joined, are exactly `zoo.generate`'s text with the same
    arguments (the same seed, the same text), inside the model's window and
    past it. Each token costs one call of the same compiled loop that
    `zoo.generate` runs (`zoo.generation.engine`). A piece is never half a
    UTF-8 character, nor the start of a stop string that may still come.
    Stopping the iteration stops the computation.

    Args:
        model: a decoder-only language model carrying its tokenizer, or an
            `EncoderDecoder` (the prompt is then the source sentence, and
            the pieces its translation, decoded as `zoo.translate` with
            `num_beams=1` decodes it).
        prompt: one str.
        skip_prompt: False yields the prompt's text first (as `zoo.generate`
            returns prompt and continuation); True only the new text.
        logprobs: None, or k: yield `GeneratedText`s instead of str, each
            a piece with the tokens chosen since the one before, their
            log-probabilities and k likeliest alternatives (as
            `zoo.generate`'s).
        The rest: as `zoo.generate`'s (`sampler` is not "beam"), the
            decoding controls included.

    Yields:
        str pieces (`GeneratedText`s with `logprobs`).

    Example:

    ```python
    import zoo
    from zoo.tokenizers import CharTokenizer

    tokenizer = CharTokenizer.from_text("ROMEO: JULIET: abcdefghijklmnopqrstuvwxyz\\n")
    lm = zoo.build("gpt-nano", "causal_lm", vocabulary_size=tokenizer.vocabulary_size(), tokenizer=tokenizer)
    for piece in zoo.stream(lm, "ROMEO:", max_new_tokens=20, sampler="top_k", top_k=5, seed=0):
        print(piece, end="", flush=True)
    ```
    """
    options = _generate_options(model, prompt, args, kwargs)
    max_new_tokens, max_length, logprobs = options["max_new_tokens"], options["max_length"], options["logprobs"]
    kwargs = options["kwargs"]
    controls = _controls(kwargs)
    speculation = speculative.settings(kwargs)
    constrained = _constrained(kwargs)
    samplers.refuse_renamed(kwargs, "zoo.stream")
    if kwargs:
        raise ValueError(f"zoo.stream takes no {', '.join(sorted(kwargs))}.")
    if not isinstance(prompt, str):
        raise ValueError(f"zoo.stream takes one prompt, a str; got {type(prompt).__name__}.")
    rows = _text_prompts(model, prompt, "zoo.stream")
    if isinstance(model, EncoderDecoder) and max_new_tokens is None and max_length is None:
        max_new_tokens = min(len(rows[0]) + 10, model.max_sequence_length - 1)  # as zoo.translate
    budgets = _text_budgets(model, rows, max_new_tokens, max_length)
    generation = TextGeneration(model, rows, budgets, controls=controls, logprobs=logprobs, speculation=speculation,
                                constraints=constraints.grammars(len(rows), **constrained),
                                **{name: options[name] for name in _SAMPLING_OPTIONS})
    return _pieces(generation, skip_prompt or isinstance(model, EncoderDecoder), logprobs is not None)


_SAMPLING_OPTIONS = ("stop", "stop_token_ids", "sampler", "seed", "temperature", "top_k", "top_p")


def _generate_options(model, prompt, args, kwargs):
    """`zoo.generate`'s arguments as given to `zoo.stream`, its defaults
    filled in: {name: value}, what `**kwargs` took as "kwargs"."""
    try:
        options = inspect.signature(generate).bind(model, prompt, *args, **kwargs)
    except TypeError as error:
        raise TypeError(f"zoo.stream takes zoo.generate's arguments: {error}") from None
    options.apply_defaults()
    return options.arguments


def _pieces(generation, skip_prompt, with_logprobs):
    row = generation.rows[0]
    if not skip_prompt and row.prompt_text:
        yield generation.generated(0, row.prompt_text, 0, 0) if with_logprobs else row.prompt_text
    given = 0  # the new tokens given out with a piece so far
    for _, piece in generation.pieces():
        if not with_logprobs:
            yield piece
            continue
        count = generation.text_token_count(0)
        yield generation.generated(0, piece, given, count)
        given = count


@dataclasses.dataclass(frozen=True)
class GeneratedText:
    """Generated text with its tokens' log-probabilities: what
    `zoo.generate` returns on text with `logprobs`, and what `zoo.stream`
    yields with it (then `text` is a piece, and the tokens are those chosen
    since the piece before).

    Attributes:
        text: str; from `zoo.generate`, the prompt and its continuation (as
            without `logprobs`).
        token_ids: the n new token ids behind the new text (a stop token
            that ended the text is not one of them).
        tokens: n str, the tokenizer's decoding of each id alone.
        token_logprobs: (n,) float32, each token's log-probability under
            the model, given what precedes it.
        top_ids: (n, k) int32, the k likeliest tokens at each position, the
            likeliest first (k is `logprobs`).
        top_logprobs: (n, k) float32, their log-probabilities.
    """

    text: str
    token_ids: tuple
    tokens: tuple
    token_logprobs: np.ndarray
    top_ids: np.ndarray
    top_logprobs: np.ndarray


class TextGeneration:
    """Text prompts decoded together through one `zoo.generation.engine.Decoding`,
    each row's text given out in pieces as its tokens come: what
    `zoo.generate` (on text), `zoo.stream` and `zoo serve` run.

    A piece is never half a UTF-8 character (a byte-level BPE token may
    end inside one: the text is held until the character is whole), nor
    the start of a stop string (held until the string is ruled out). A row
    ends at its budget, at a stop token (not part of the text), or at the
    first stop string in its new text (cut before it).

    Args:
        model: a decoder-only language model, or an encoder-decoder
            (translation: the prompts are the sources, the decoder starts
            from `[START]` and stops at `[END]`), carrying its tokenizer.
        prompt_ids: B lists of token ids (the sources, for an
            encoder-decoder).
        budgets: the most new tokens, one int or one per row. A decoder-only
            model goes on past its window (nanoGPT's sliding window).
        stop: stop strings: None, a str, a list of str, or one such per row
            (a list of B lists).
        stop_token_ids, sampler, seed, temperature, top_k, top_p: as `zoo.generate`'s
            (each one value, or one a row).
        bucket: round the compiled shapes up, see `zoo.generation.Decoding`.
        controls: the decoding controls' settings (`min_p`,
            `repetition_penalty`, ...: `zoo.generation.controls`), or None.
        logprobs: None, or k: record each new token's log-probability and
            its k likeliest alternatives (`generated`).
        speculation: None, or speculative decoding's settings
            (`assistant_model` or `prompt_lookup_num_tokens`, ...:
            `zoo.generation.speculative`; one prompt, decoder-only).
        constraints: None, one grammar, or one a row (None for a free row):
            `zoo.generation.constraints.grammar`'s, read through the
            model's tokenizer (`zoo.generation.Decoding`'s `constraints`).

    Attributes:
        rows: B `TextRow`s: `prompt_text`, `text` (the new text so far),
            `finish_reason` ("stop", "length" or None), `prompt_tokens`,
            `completion_tokens`.
        decoding: the engine's `zoo.generation.Decoding` under it: per
            row, `new_tokens` (the ids chosen so far) and `probabilities`
            (the model's probability of each), for a caller that shows
            tokens as well as text.

    Example:

    ```python
    prompt_ids = zoo.tokenizers.token_id_lists(lm.tokenizer, ["ROMEO:"])
    generation = TextGeneration(lm, prompt_ids, 20, sampler="top_k", top_k=5, seed=0)
    for pieces in generation.steps():  # after each token: [(row, piece), ...]
        ids, probabilities = generation.decoding.new_tokens[0], generation.decoding.probabilities[0]
    generation.rows[0].text  # the new text, as zoo.generate(lm, "ROMEO:", ...) continues it
    ```
    """

    def __init__(self, model, prompt_ids, budgets, *, stop=None, stop_token_ids=AUTO, sampler="greedy", seed=None,
                 temperature=1.0, top_k=50, top_p=0.9, bucket="lengths", controls=None, logprobs=None,
                 constraints=None, speculation=None, **kwargs):
        samplers.refuse_renamed(kwargs, "TextGeneration")
        tokenizer = tokenizer_of(model, "zoo.generate")
        if isinstance(sampler, str) and sampler == "beam":
            raise ValueError("sampler='beam' cannot stream (the best beam changes until the end); use zoo.generate.")
        sampling = dict(sampler=sampler, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
        batch = len(prompt_ids)
        stops = _stop_strings(stop, batch)
        if isinstance(model, EncoderDecoder):
            prompt, suppressed, settled = sampled_decoding(tokenizer)
            ends = [special_id(tokenizer, "end")] if is_auto(stop_token_ids) else stop_token_ids
            room = model.max_sequence_length - len(prompt)
            budgets = [min(b, room) for b in ([budgets] * batch if isinstance(budgets, int) else budgets)]
            self.decoding = Decoding(model, [prompt] * batch, budgets, sampling, ends, source=prompt_ids,
                                     bucket=bucket, controls={**settled, **(controls or {})}, logprobs=logprobs,
                                     suppress_token_ids=suppressed, constraints=constraints, tokenizer=tokenizer,
                                     speculation=speculation)
            text_prompts = [[] for _ in prompt_ids]
        else:
            ends = auto_stop_ids(tokenizer) if is_auto(stop_token_ids) else stop_token_ids
            self.decoding = Decoding(model, prompt_ids, budgets, sampling, ends, slide=True, bucket=bucket,
                                     controls=controls, logprobs=logprobs, constraints=constraints,
                                     tokenizer=tokenizer, speculation=speculation)
            text_prompts = prompt_ids
        ends = self.decoding.stop_token_ids
        self.tokenizer = tokenizer
        self.rows = [TextRow(tokenizer, ids, len(ids), row_stops, ends) for ids, row_stops in zip(text_prompts, stops)]
        for row, ids in zip(self.rows, prompt_ids):
            row.prompt_tokens = len(ids)

    def steps(self, every_token=True):
        """Decodes, yielding after each step of the decoding the list of
        `(row, piece)` it gave (often empty), until every row has ended. A
        caller that stops iterating stops the decoding."""
        decoding = self.decoding
        for _ in decoding.steps(every_token):
            pieces = []
            for b, row in enumerate(self.rows):
                if row.finish_reason is not None:
                    continue
                piece = row.update(decoding.new_tokens[b], decoding.finish_reasons[b])
                if row.finish_reason is not None:
                    decoding.finish(b)  # a stop string: the decoding stops computing this row
                if piece:
                    pieces.append((b, piece))
            yield pieces

    def pieces(self, every_token=True):
        """Yields `(row, piece)` as pieces of new text come (see `steps`)."""
        for pieces in self.steps(every_token):
            yield from pieces

    def end(self, row):
        """Ends `row` now (its reader has gone): nothing more is computed for it."""
        if self.rows[row].finish_reason is None:
            self.rows[row].finish_reason = "stop"
        self.decoding.finish(row)

    def run(self):
        """Decodes to the end (in whole cache stages); returns the B new texts."""
        for _ in self.steps(every_token=False):
            pass
        return [row.text for row in self.rows]

    def text_token_count(self, row):
        """How many of `row`'s new tokens make its text: all of them, less
        a stop token that ended it."""
        new = self.decoding.new_tokens[row]
        return len(new) - bool(new and new[-1] in self.decoding.stop_token_ids)

    def generated(self, row, text, start, end):
        """A `GeneratedText` of `text` with `row`'s new tokens start..end-1
        and what was recorded of them (with `logprobs`)."""
        decoding = self.decoding
        ids = tuple(decoding.new_tokens[row][start:end])
        k = decoding.logprobs or 0
        return GeneratedText(
            text, ids, tuple(decode(self.tokenizer, [t]) for t in ids),
            np.asarray(decoding.token_logprobs[row][start:end], "float32"),
            np.asarray(decoding.top_ids[row][start:end], "int32").reshape(len(ids), k),
            np.asarray(decoding.top_logprobs[row][start:end], "float32").reshape(len(ids), k),
        )


class TextRow:
    """One row's text as its tokens come (see `TextGeneration`)."""

    def __init__(self, tokenizer, prompt_ids, prompt_tokens, stop, stop_token_ids):
        self.tokenizer, self.prompt_ids, self.stop, self.stop_token_ids = tokenizer, list(prompt_ids), stop, stop_token_ids
        self.prompt_text = decode(tokenizer, self.prompt_ids)
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = 0
        self.text = ""  # the new text given out so far
        self.finish_reason = None

    def update(self, new_tokens, finish_reason):
        """The next piece of new text, after `new_tokens` (all of the row's
        new tokens so far); `finish_reason`: the decoding's, once the row
        has ended there."""
        self.completion_tokens = len(new_tokens)
        ids = list(new_tokens)
        if ids and ids[-1] in self.stop_token_ids:
            ids = ids[:-1]
        text = self._new_text(ids)
        cut = min((i for i in (text.find(s) for s in self.stop) if i >= 0), default=-1)
        if cut >= 0:
            text, finish_reason = text[:cut], "stop"
        elif finish_reason is None:
            text = _without_unfinished_end(text, self.stop)
        self.finish_reason = finish_reason
        if not text.startswith(self.text):  # a tokenizer whose text of more ids is not an extension: nothing to add
            return ""
        piece, self.text = text[len(self.text):], text
        return piece

    def _new_text(self, ids):
        full = decode(self.tokenizer, self.prompt_ids + ids)
        if full.startswith(self.prompt_text):
            return full[len(self.prompt_text):]
        return decode(self.tokenizer, ids)


def _without_unfinished_end(text, stop):
    """`text` less what may still change: a trailing half UTF-8 character
    (decoded as U+FFFD) and the longest end that begins a stop string."""
    text = text.rstrip("\ufffd")
    held = 0
    for s in stop:
        for size in range(min(len(s) - 1, len(text)), held, -1):
            if text.endswith(s[:size]):
                held = size
                break
    return text[: len(text) - held]


def _stop_strings(stop, batch):
    """B tuples of stop strings from None, a str, a list of str, or B lists."""
    def checked(strings):
        if strings is None:
            return ()
        if isinstance(strings, str):
            strings = [strings]
        if not isinstance(strings, (list, tuple)) or not all(isinstance(s, str) and s for s in strings):
            raise ValueError(f"`stop` must be a str or a list of non-empty str; got {strings!r}.")
        return tuple(strings)

    if isinstance(stop, (list, tuple)) and stop and all(isinstance(s, (list, tuple)) for s in stop):
        if len(stop) != batch:
            raise ValueError(f"`stop` has {len(stop)} lists for {batch} prompts; expected one per prompt.")
        return [checked(s) for s in stop]
    return [checked(stop)] * batch


def _text_prompts(model, prompt, what):
    """The tokenizer's ids of a str or a list of str (cut to the model's
    window for an encoder-decoder's sources)."""
    if isinstance(model, EncoderDecoder):
        tokenizer = model.source_tokenizer or tokenizer_of(model, what)
    elif isinstance(model, (CausalLM, DecoderStack)):
        tokenizer = tokenizer_of(model, what)
    else:
        raise ValueError(
            f"{what} on text needs a causal LM (a GPTCausalLM, LlamaCausalLM or Gemma3CausalLM) or an EncoderDecoder; "
            f"got a {type(model).__name__}."
        )
    texts = [prompt] if isinstance(prompt, str) else list(prompt)
    rows = token_id_lists(tokenizer, texts)
    check_not_empty(rows, texts)
    if isinstance(model, EncoderDecoder):
        rows = [row[: model.max_sequence_length] for row in rows]
    return rows


def _text_budgets(model, rows, max_new_tokens, max_length):
    if (max_new_tokens is None) == (max_length is None):
        raise ValueError(
            "zoo.generate on text needs one of `max_length` (prompt plus new tokens) or `max_new_tokens`."
        )
    if isinstance(model, EncoderDecoder):
        window = model.max_sequence_length
        return [max_new_tokens if max_new_tokens is not None else min(max_length, window - 1)] * len(rows)
    budgets = [max_new_tokens if max_new_tokens is not None else max_length - len(row) for row in rows]
    for row, budget in zip(rows, budgets):
        if not isinstance(budget, (int, np.integer)) or isinstance(budget, bool) or budget < 1:
            limit = "max_new_tokens" if max_new_tokens is not None else "max_length"
            raise ValueError(
                f"`{limit}`={max_new_tokens if max_new_tokens is not None else max_length} leaves no new token "
                f"after a prompt of {len(row)} tokens; expected max_length > prompt length or max_new_tokens >= 1."
            )
    return budgets


def _generate_text(model, prompt, max_new_tokens, max_length, sampler, stop_token_ids, seed, temperature, top_k, top_p,
                   stop, logprobs, kwargs):
    if isinstance(model, EncoderDecoder) and isinstance(sampler, str) and sampler == "beam":
        raise ValueError("zoo.generate on an EncoderDecoder's text decodes greedily or samples; its beam search is "
                         "zoo.translate's.")
    rows = _text_prompts(model, prompt, "zoo.generate")
    budgets = _text_budgets(model, rows, max_new_tokens, max_length)
    if isinstance(sampler, str) and sampler == "beam":
        if logprobs is not None:
            raise ValueError("`logprobs` is not taken by beam search (a beam's tokens change until the end); "
                             "use a sampler.")
        return _beam_text(model, prompt, rows, budgets, stop_token_ids, stop, temperature, kwargs)
    controls = _controls(kwargs)
    speculation = speculative.settings(kwargs)
    grammars = constraints.grammars(len(rows), **_constrained(kwargs))
    if kwargs:
        raise ValueError(f"zoo.generate on text takes no {', '.join(sorted(kwargs))} (only with sampler='beam').")
    generation = TextGeneration(model, rows, budgets, stop=stop, stop_token_ids=stop_token_ids, sampler=sampler,
                                seed=seed, temperature=temperature, top_k=top_k, top_p=top_p, controls=controls,
                                logprobs=logprobs, constraints=grammars, speculation=speculation)
    texts = [row.prompt_text + new for row, new in zip(generation.rows, generation.run())]
    if logprobs is not None:
        texts = [generation.generated(b, text, 0, generation.text_token_count(b)) for b, text in enumerate(texts)]
    return texts[0] if isinstance(prompt, str) else texts


def _controls(kwargs):
    """The decoding controls taken out of `kwargs` (`zoo.generation.controls`)."""
    return {name: kwargs.pop(name) for name in CONTROLS if kwargs.get(name) is not None}


def _constrained(kwargs):
    """The constraints' arguments taken out of `kwargs` (`zoo.generation.constraints.grammars`)."""
    return {name: kwargs.pop(name) for name in constraints.KINDS if name in kwargs}


def _beam_text(model, prompt, rows, budgets, stop_token_ids, stop, temperature, kwargs):
    tokenizer = tokenizer_of(model, "zoo.generate")
    window = (model.backbone if isinstance(model, CausalLM) else model).max_sequence_length
    if max(len(r) + b for r, b in zip(rows, budgets)) > window:
        raise ValueError(
            f"sampler='beam' generates within the model's context of {window} tokens only; ask for fewer "
            "tokens or use 'greedy', 'temperature', 'top_k' or 'top_p'."
        )
    ends = auto_stop_ids(tokenizer) if is_auto(stop_token_ids) else stop_token_ids
    result = generate_ids(model, rows, max(budgets), sampler="beam", stop_token_ids=ends,
                                 temperature=temperature, **kwargs)
    stops = _stop_strings(stop, len(rows))
    texts = []
    for row, new, budget, row_stops in zip(rows, result.sequences, budgets, stops):
        text_row = TextRow(tokenizer, row, len(row), row_stops, check_stop_tokens(ends, model.vocabulary_size))
        text_row.update([int(t) for t in new][:budget], "length")
        texts.append(text_row.prompt_text + text_row.text)
    return texts[0] if isinstance(prompt, str) else texts
