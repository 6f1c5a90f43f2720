"""What the text API shares: a model's tokenizer, its special ids, a
sequence's text, the checks of text input, and BERT's packing of
sentences.

Shape letters: N sentences, W the model's window (its
`max_sequence_length`).
"""

import keras
import numpy as np

from zoo.tokenizers import token_id_lists

# The default of `stop_token_ids`: the tokenizer's end token for text (as
# keras-hub's CausalLM), none for token ids.
AUTO = "auto"

SPECIAL = {
    "start": ("start_token_id", "[START]"),
    "end": ("end_token_id", "[END]"),
    "cls": ("cls_token_id", "[CLS]"),
    "sep": ("sep_token_id", "[SEP]"),
}


def decoder_prompt(tokenizer):
    """An encoder-decoder's first decoder token: the checkpoint's
    `decoder_start_token_id`, else the tokenizer's start token."""
    settings = getattr(tokenizer, "generation", None) or {}
    start = settings.get("decoder_start_token_id")
    return [special_id(tokenizer, "start") if start is None else int(start)]


def sampled_decoding(tokenizer):
    """(decoder prompt, suppressed ids, controls) of an encoder-decoder's
    greedy or sampled decoding as its checkpoint's generation_config.json
    says: `decoder_start_token_id`, then `forced_bos_token_id` (BART's
    `<s>`, chosen with probability 1, so part of the prompt); the
    single-token `bad_words_ids` (Marian's `<pad>`) never chosen; its
    `no_repeat_ngram_size`. Without settings: the start token alone."""
    settings = getattr(tokenizer, "generation", None) or {}
    prompt = decoder_prompt(tokenizer)
    forced = settings.get("forced_bos_token_id")
    if forced is not None:
        prompt.append(int(forced))
    suppressed = [int(ids[0]) for ids in settings.get("bad_words_ids") or () if len(ids) == 1]
    ngram = int(settings.get("no_repeat_ngram_size") or 0)
    return prompt, suppressed or None, {"no_repeat_ngram_size": ngram} if ngram else {}


def tokenizer_of(model, what):
    for owner in (model, getattr(model, "backbone", None)):
        tokenizer = getattr(owner, "tokenizer", None)
        if tokenizer is not None:
            return tokenizer
    raise ValueError(
        f"{what}: the {type(model).__name__} carries no tokenizer; pass token ids or attach one with "
        "model.tokenizer = ... (a keras-hub tokenizer, zoo.tokenizers.CharTokenizer, WordTokenizer or HuggingFaceTokenizer)."
    )


def special_id(tokenizer, kind):
    """The id of a special token: the tokenizer's `<kind>_token_id`, else its
    vocabulary's `[KIND]` token."""
    attribute, token = SPECIAL[kind]
    value = getattr(tokenizer, attribute, None)
    if value is not None:
        return int(value)
    vocabulary = tokenizer.get_vocabulary()
    if token in vocabulary:
        return vocabulary.index(token)
    raise ValueError(
        f"the tokenizer ({type(tokenizer).__name__}) has no {token} token; expected one in its vocabulary "
        f"(or a `{attribute}`), as the recipes' tokenizers have."
    )


def auto_stop_ids(tokenizer):
    # A checkpoint may declare several end ids (Llama 3 instruct: <|end_of_text|> and <|eot_id|>).
    ends = getattr(tokenizer, "end_token_ids", None)
    if ends:
        return [int(end) for end in ends]
    end = getattr(tokenizer, "end_token_id", None)
    return None if end is None else [int(end)]


def decode(tokenizer, ids):
    """A tokenizer's text for one sequence of ids, as a Python str."""
    if not len(ids):
        return ""
    text = tokenizer.detokenize([list(ids)])
    if not isinstance(text, (str, list, tuple)):
        text = keras.ops.convert_to_numpy(text)
    text = text if isinstance(text, str) else text[0]
    if isinstance(text, np.ndarray):
        text = text.item()
    return text.decode("utf-8") if isinstance(text, bytes) else str(text)


def is_text(prompt):
    if isinstance(prompt, str):
        return True
    return isinstance(prompt, (list, tuple)) and len(prompt) > 0 and all(isinstance(t, str) for t in prompt)


def is_auto(value):
    return isinstance(value, str) and value == AUTO


def sentence_list(sentences, what, pairs=False):
    if isinstance(sentences, str):
        raise ValueError(f"{what} takes a list of sentences; got one str (wrap it: [sentence]).")
    if not isinstance(sentences, (list, tuple)) or not sentences or not all(isinstance(s, str) for s in sentences):
        also = ", or of (text, pair) tuples of str" if pairs else ""
        raise ValueError(f"{what} takes a non-empty list of str{also}; got {type(sentences).__name__}.")
    return list(sentences)


def check_not_empty(rows, texts):
    for i, (row, text) in enumerate(zip(rows, texts)):
        if not row:
            raise ValueError(f"text {i} ({text!r}) has no tokens; expected at least one.")


def bert_outputs(model, sentences, batch_size, what, pairs=False):
    """The model's outputs for `[CLS] tokens [SEP]`, as bert_classify packs
    them; with `pairs`, sentences may be (text, pair) tuples, packed as
    `[CLS] text [SEP] pair [SEP]` with segment ids 0 then 1."""
    from zoo.data.packing import pack_sentences

    tokenizer = tokenizer_of(model, what)
    if pairs and isinstance(sentences, (list, tuple)) and sentences and all(
        isinstance(s, tuple) and len(s) == 2 and all(isinstance(t, str) for t in s) for s in sentences
    ):
        firsts, seconds = [a for a, _ in sentences], [b for _, b in sentences]
    else:
        firsts, seconds = sentence_list(sentences, what, pairs), None
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"`batch_size` must be a positive integer; got {batch_size!r}.")
    cls_id, sep_id = special_id(tokenizer, "cls"), special_id(tokenizer, "sep")
    first_ids = token_id_lists(tokenizer, firsts)
    second_ids = None if seconds is None else token_id_lists(tokenizer, seconds)
    window = model.backbone.max_sequence_length
    longest = max(len(ids) + 2 + (0 if second_ids is None else len(second_ids[i]) + 1)
                  for i, ids in enumerate(first_ids))
    inputs = pack_sentences(first_ids, second_ids, min(longest, window), cls_id, sep_id)  # [PAD] is id 0
    return np.asarray(model.predict(inputs, batch_size=batch_size, verbose=0))
