"""Subword vocabularies in SentencePiece's scheme, trained by the
`tokenizers` package (imported by the function) as a `HuggingFaceTokenizer`."""

import json
from pathlib import Path

from zoo.files import write_text
from zoo.tokenizers.huggingface_tokenizer import HuggingFaceTokenizer
from zoo.tokenizers.text_tokenizer import python_strings

SENTENCE_PIECE_RESERVED_TOKENS = ("[PAD]", "[UNK]", "[START]", "[END]")
SENTENCE_PIECE_ALGORITHMS = ("unigram", "bpe")


def train_sentence_piece(texts, vocabulary_size, algorithm="unigram", reserved_tokens=SENTENCE_PIECE_RESERVED_TOKENS,
                         cache=None):
    """Trains a cased subword vocabulary in SentencePiece's scheme with the
    `tokenizers` package and returns it as a `HuggingFaceTokenizer`.

    As SentencePiece (Kudo and Richardson, 2018): the text is NFKC-normalised
    and keeps its case; each space becomes the mark `▁` at the start of the
    next piece, so detokenizing gives the text back, punctuation attached
    ("A man's T-shirt."). The pieces are a unigram language model's (Kudo,
    2018; Marian / OPUS-MT's choice) or byte-pair merges (Sennrich et al.,
    2016). The reserved tokens take the first ids, so `"[PAD]"` is 0;
    `[START]` and `[END]` become the tokenizer's start and end ids, and
    tokenizing adds neither.

    Args:
        texts: a list of str, e.g. both sides of a parallel corpus for one
            shared vocabulary.
        vocabulary_size: int, the reserved tokens included.
        algorithm: "unigram" or "bpe".
        reserved_tokens: a sequence of str starting with "[PAD]" and holding
            "[UNK]", "[START]" and "[END]".
        cache: None, or a folder where the trained vocabulary is kept as
            `<sha256 of the texts and settings>.json` and read back by
            every later call with the same texts and settings. The
            `tokenizers` unigram trainer's scores differ slightly from one
            process to the next (by up to 1e-3 on Multi30k), which reorders
            pieces of near-equal score; with a cache, the same call gives
            the same vocabulary every time on that machine.

    Returns:
        A `HuggingFaceTokenizer`.

    Example:
    ```python
    tokenizer = train_sentence_piece(["Ein Mann fährt Fahrrad.", "A man rides a bike."], 60)
    tokenizer.detokenize(tokenizer("A man rides a bike."))  # "A man rides a bike."
    ```
    """
    import tokenizers
    from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

    reserved_tokens = list(reserved_tokens)
    needed = ("[UNK]", "[START]", "[END]")
    if reserved_tokens[:1] != ["[PAD]"] or any(token not in reserved_tokens for token in needed):
        raise ValueError(
            f"reserved_tokens must start with '[PAD]' (id 0) and hold {', '.join(needed)}; got {reserved_tokens}"
        )
    if algorithm not in SENTENCE_PIECE_ALGORITHMS:
        raise ValueError(f"algorithm: expected one of {', '.join(SENTENCE_PIECE_ALGORITHMS)}; got {algorithm!r}.")
    if not isinstance(vocabulary_size, int) or vocabulary_size <= len(reserved_tokens):
        raise ValueError(
            f"vocabulary_size: expected an int above the {len(reserved_tokens)} reserved tokens; got {vocabulary_size!r}."
        )
    texts = python_strings(texts)
    cached = None
    if cache is not None:
        cached = Path(cache) / f"{_training_digest(texts, vocabulary_size, algorithm, reserved_tokens)}.json"
        if cached.is_file():
            return _sentence_piece_tokenizer(cached.read_text(encoding="utf-8"))
    if algorithm == "unigram":
        backend = tokenizers.Tokenizer(models.Unigram())
        trainer = trainers.UnigramTrainer(
            vocab_size=vocabulary_size, special_tokens=reserved_tokens, unk_token="[UNK]", show_progress=False
        )
    else:
        backend = tokenizers.Tokenizer(models.BPE(unk_token="[UNK]"))
        trainer = trainers.BpeTrainer(vocab_size=vocabulary_size, special_tokens=reserved_tokens, show_progress=False)
    backend.normalizer = normalizers.NFKC()
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Metaspace()
    backend.train_from_iterator(texts, trainer)
    tokenizer = _sentence_piece_tokenizer(backend)
    if cached is not None:
        write_text(cached, backend.to_str())
    return tokenizer


def _sentence_piece_tokenizer(backend):
    """A `HuggingFaceTokenizer` of `train_sentence_piece`'s special tokens
    from a `tokenizers.Tokenizer` or its JSON."""
    return HuggingFaceTokenizer.from_file(backend, bos_token="[START]", eos_token="[END]", pad_token="[PAD]",
                                          add_bos=False)


def _training_digest(texts, vocabulary_size, algorithm, reserved_tokens):
    """The sha256 (hex) of a subword vocabulary's training texts, its
    settings and the `tokenizers` version that trains it."""
    import hashlib

    import tokenizers

    digest = hashlib.sha256()
    settings = dict(algorithm=algorithm, vocabulary_size=vocabulary_size, reserved_tokens=list(reserved_tokens),
                    normalizer="NFKC", pre_tokenizer="Metaspace", tokenizers=tokenizers.__version__)
    digest.update(json.dumps(settings, sort_keys=True).encode("utf-8"))
    for text in texts:
        digest.update(text.encode("utf-8"))
        digest.update(b"\0")
    return digest.hexdigest()
