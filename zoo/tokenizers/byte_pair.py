"""Byte-level byte-pair vocabularies (GPT-2's) for keras-hub's
`BytePairTokenizer`, learned by the `tokenizers` package's `BpeTrainer`.

Example:
```python
tokenizer = train_byte_pair(sentences, vocabulary_size=1000)
tokenizer.detokenize(tokenizer("Größe, 東京 🙂"))  # "Größe, 東京 🙂"
```
"""

import json

BYTE_PAIR_RESERVED_TOKENS = ("[PAD]", "[START]", "[END]")


def train_byte_pair(
    texts,
    vocabulary_size,
    reserved_tokens=BYTE_PAIR_RESERVED_TOKENS,
    min_frequency=2,
):
    """Trains a byte-level BPE vocabulary and merges (GPT-2 style) and
    returns keras-hub's tokenizer of them.

    BPE (Sennrich et al., 2016) on bytes, as GPT-2: the texts are pre-split
    exactly as keras-hub's `BytePairTokenizer` splits them, and the
    `tokenizers` package's `BpeTrainer` maps each word's bytes to printable
    characters (its `ByteLevel` alphabet, GPT-2's `bytes_to_unicode`) and
    merges the most frequent adjacent pair until the vocabulary is full.
    The same texts give the same vocabulary.

    The vocabulary is the reserved tokens (`"[PAD]"` first, id 0), then the
    256 byte characters (so no text is ever out of vocabulary), then the
    merged tokens.

    Args:
        texts: a list of str.
        vocabulary_size: int. The largest vocabulary size, at least
            `len(reserved_tokens) + 257` (room for one merge).
        reserved_tokens: a sequence of str, starting with `"[PAD]"`; kept
            whole when they appear in a text, and never part of a merge.
        min_frequency: int. Stop when the most frequent pair is rarer; a
            `ValueError` when even the first is.

    Returns:
        A `keras_hub.tokenizers.BytePairTokenizer`. Save it with
        `tokenizer.save_assets(folder)` and reload it with
        `BytePairTokenizer(vocabulary=folder/"vocabulary.json",
        merges=folder/"merges.txt", unsplittable_tokens=reserved_tokens)`.
    """
    import keras_hub
    import tokenizers
    from tokenizers import models, pre_tokenizers, trainers

    # Not in the public `keras_hub.tokenizers`: the tokenizer's own pre-split,
    # so that training splits text exactly as tokenizing will.
    from keras_hub.src.tokenizers.byte_pair_tokenizer import split_strings_for_bpe

    reserved_tokens = list(reserved_tokens)
    if reserved_tokens[:1] != ["[PAD]"]:
        raise ValueError(
            f"reserved_tokens must start with '[PAD]', got {reserved_tokens}"
        )
    if vocabulary_size < len(reserved_tokens) + 257:
        raise ValueError(
            f"vocabulary_size must be at least {len(reserved_tokens) + 257} "
            f"(the reserved tokens, 256 bytes and one merge), got {vocabulary_size}"
        )
    texts = list(texts)

    def words():
        """keras-hub's words of the texts, 1024 texts at a time, without
        the reserved tokens."""
        for start in range(0, len(texts), 1024):
            split = split_strings_for_bpe(texts[start:start + 1024], reserved_tokens)
            batch = [word.decode("utf-8") for word in split.flat_values.numpy().tolist()]
            yield [word for word in batch if word not in reserved_tokens]

    backend = tokenizers.Tokenizer(models.BPE())
    # Each word is already split: only map its bytes to the byte alphabet.
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocabulary_size,
        min_frequency=min_frequency,
        special_tokens=reserved_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(words(), trainer)
    model = json.loads(backend.to_str())["model"]
    merges = [pair if isinstance(pair, str) else " ".join(pair) for pair in model["merges"]]
    if not merges:
        raise ValueError(
            f"no pair of symbols occurs {min_frequency} times in the {len(texts)} texts; "
            "expected more text or a lower min_frequency"
        )
    return keras_hub.tokenizers.BytePairTokenizer(
        vocabulary=model["vocab"],
        merges=merges,
        unsplittable_tokens=reserved_tokens,
    )
