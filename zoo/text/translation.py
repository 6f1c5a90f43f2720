"""Translation: `zoo.translate`, sentences in and out through an
encoder-decoder that carries its tokenizer.

Shape letters: N sentences, W the model's window (its `max_sequence_length`).
"""

from zoo.tokenizers import token_id_lists
from zoo.generation.api import beam_search, generate_ids
from zoo.models import EncoderDecoder
from zoo.text.tokens import check_not_empty, decode, decoder_prompt, sentence_list, special_id, tokenizer_of


def translate(model, sentences, max_length=None, num_beams=None, length_penalty=None, batch_size=128):
    """Translate sentences with an encoder-decoder that carries its tokenizer.

    As the translate and demo recipes decode: each source is tokenized (no
    start or end token) and cut to the model's window W, the decoder starts
    from `[START]` and stops at `[END]` (the tokenizer's `start_token_id`
    / `end_token_id`, or those tokens of its vocabulary), and the tokens
    before `[END]` are detokenized. Sentences are decoded in order of
    length, `batch_size` at a time, so a batch's compiled search is shared
    by sentences of similar length.

    A checkpoint's model (Marian, BART: its tokenizer carries the
    checkpoint's `generation_config.json` as `generation`) decodes as
    transformers does by default: its `num_beams`, `length_penalty` and
    `max_length` (transformers' 1, 1.0 and 20 where it has none;
    `max_length` counts the decoder's prompt), its single-token
    `bad_words_ids` (Marian's `<pad>`) never chosen, from its
    `decoder_start_token_id`, with its length controls: `min_length`,
    `no_repeat_ngram_size`, `early_stopping`, `forced_bos_token_id`
    (BART's `<s>`, the first new token, counted in the beams' length as
    transformers counts it), `forced_eos_token_id` and `renormalize_logits`
    (`zoo.generation.beam_search`; one beam is greedy decoding with
    them). An argument given overrides the setting.

    Args:
        model: an `EncoderDecoder` carrying a tokenizer: the target's, and
            the source's too unless the model carries a `source_tokenizer`.
        sentences: a list of str.
        max_length: the most target tokens of a translation (`[END]`
            included); by default the checkpoint's, else the longest source
            of the batch plus 10, at most W less the decoder's prompt.
        num_beams: beam search with this many beams; 1 is greedy decoding;
            by default the checkpoint's, else 4.
        length_penalty: beam score `log_prob / length ** length_penalty`;
            by default the checkpoint's, else 0.6.
        batch_size: sentences per call.

    Returns:
        A list of str, one translation per sentence.

    Example:

    ```python
    import zoo
    from zoo.tokenizers import WordTokenizer

    tokenizer = WordTokenizer.from_texts(["a dog runs", "ein hund läuft"])
    model = zoo.build("transformer-tiny", vocabulary_size=tokenizer.vocabulary_size(), tokenizer=tokenizer)
    zoo.translate(model, ["a dog runs"], num_beams=2)  # a list of one str
    ```
    """
    if not isinstance(model, EncoderDecoder):
        raise ValueError(
            f"zoo.translate needs an EncoderDecoder; got a {type(model).__name__} "
            "(use zoo.generate for a GPTCausalLM, zoo.classify for a BertClassifier)."
        )
    tokenizer = tokenizer_of(model, "zoo.translate")
    sentences = sentence_list(sentences, "zoo.translate")
    window = model.max_sequence_length
    settings, suppressed, controls = getattr(tokenizer, "generation", None), None, None
    prompt = decoder_prompt(tokenizer)
    room = window - len(prompt)  # target tokens the context leaves after the prompt
    if settings is not None:  # a checkpoint's generation_config.json, with transformers' defaults
        num_beams = settings.get("num_beams", 1) if num_beams is None else num_beams
        length_penalty = settings.get("length_penalty", 1.0) if length_penalty is None else length_penalty
        if max_length is None:
            max_length = max(1, min(settings.get("max_length", 20) - len(prompt), room))  # less the prompt
        suppressed = [ids[0] for ids in settings.get("bad_words_ids") or () if len(ids) == 1]
        controls = length_controls(settings, len(prompt))
    num_beams = 4 if num_beams is None else num_beams
    length_penalty = 0.6 if length_penalty is None else length_penalty
    for name, value in (("num_beams", num_beams), ("batch_size", batch_size)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"`{name}` must be a positive integer; got {value!r}.")
    if max_length is not None and not (isinstance(max_length, int) and 1 <= max_length <= room):
        raise ValueError(
            f"`max_length` must be an integer in [1, {room}] (the model's context {window} minus the "
            f"decoder's {len(prompt)} prompt token(s)); got {max_length!r}."
        )
    end = special_id(tokenizer, "end")
    source_tokenizer = model.source_tokenizer or tokenizer
    sources = [ids[:window] for ids in token_id_lists(source_tokenizer, sentences)]
    check_not_empty(sources, sentences)
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    outputs = [None] * len(sources)
    for first in range(0, len(order), batch_size):
        rows = order[first : first + batch_size]
        chunk = [sources[i] for i in rows]
        budget = max_length or min(max(map(len, chunk)) + 10, room)
        if controls is not None:  # a checkpoint's settings: transformers' beam search, or greedy with one beam
            early_stopping = True if num_beams == 1 else controls["early_stopping"]
            beams = beam_search(model, [prompt] * len(chunk), budget, num_beams, length_penalty, [end], source=chunk,
                                suppress_token_ids=suppressed, **{**controls, "early_stopping": early_stopping})
            sequences = [row[0] for row in beams.sequences]
        else:
            sequences = generate_ids(
                model, [prompt] * len(chunk), budget, sampler="beam" if num_beams > 1 else "greedy",
                stop_token_ids=[end], source=chunk, num_beams=num_beams, length_penalty=length_penalty,
            ).sequences
        for i, tokens in zip(rows, sequences):
            tokens = [int(t) for t in tokens][1 if controls and controls["forced_first_token_id"] is not None else 0 :]
            outputs[i] = decode(tokenizer, tokens[: tokens.index(end)] if end in tokens else tokens)
    return outputs


def length_controls(settings, prompt_length):
    """`beam_search`'s length controls from a generation_config.json, with
    transformers' defaults: `min_length` (0, counting the decoder's
    prompt), `no_repeat_ngram_size` (0), `early_stopping` (False),
    `forced_bos_token_id` and `forced_eos_token_id` (none), and
    `renormalize_logits` (False)."""

    def token(key):  # one id, or the first of several
        value = settings.get(key)
        value = (value[0] if value else None) if isinstance(value, list) else value
        return None if value is None else int(value)

    return dict(
        min_new_tokens=max(0, int(settings.get("min_length") or 0) - prompt_length),
        no_repeat_ngram_size=int(settings.get("no_repeat_ngram_size") or 0),
        early_stopping=settings.get("early_stopping", False),
        forced_first_token_id=token("forced_bos_token_id"),
        forced_stop_token_id=token("forced_eos_token_id"),
        renormalize_logits=bool(settings.get("renormalize_logits", False)),
    )

