"""Byte-pair vocabularies for keras-hub's `BytePairTokenizer`."""

import collections
import heapq

BYTE_PAIR_RESERVED_TOKENS = ("[PAD]", "[START]", "[END]")


def train_byte_pair(
    texts,
    vocabulary_size,
    reserved_tokens=BYTE_PAIR_RESERVED_TOKENS,
    min_frequency=2,
):
    """Trains a byte-level BPE vocabulary and merges (GPT-2 style).

    keras-hub 0.32 ships a `BytePairTokenizer` but no trainer for it, so this
    is a small standard one (Sennrich et al., 2016, on bytes as in GPT-2):
    texts are pre-split exactly as the tokenizer splits them (keras-hub's
    `split_strings_for_bpe`), each word becomes its bytes mapped to printable
    characters (`bytes_to_unicode`), and the most frequent adjacent pair is
    merged until the vocabulary is full. Ties go to the smaller pair, so the
    result is deterministic.

    The vocabulary is the reserved tokens (`"[PAD]"` first, id 0), then the
    256 byte characters (so no text is ever out of vocabulary), then the
    merged tokens.

    Args:
        texts: a list of str.
        vocabulary_size: int. The largest vocabulary size, at least
            `len(reserved_tokens) + 256`.
        reserved_tokens: a sequence of str, starting with `"[PAD]"`; kept
            whole when they appear in a text.
        min_frequency: int. Stop when the most frequent pair is rarer.

    Returns:
        A `keras_hub.tokenizers.BytePairTokenizer`. Save it with
        `tokenizer.save_assets(folder)` and reload it with
        `BytePairTokenizer(vocabulary=folder/"vocabulary.json",
        merges=folder/"merges.txt", unsplittable_tokens=reserved_tokens)`.
    """
    import keras_hub

    # Not in the public `keras_hub.tokenizers`: the tokenizer's own pre-split
    # and byte alphabet, so that training splits text exactly as it will.
    from keras_hub.src.tokenizers.byte_pair_tokenizer import (
        bytes_to_unicode,
        split_strings_for_bpe,
    )

    reserved_tokens = list(reserved_tokens)
    if reserved_tokens[:1] != ["[PAD]"]:
        raise ValueError(
            f"reserved_tokens must start with '[PAD]', got {reserved_tokens}"
        )
    if vocabulary_size < len(reserved_tokens) + 256:
        raise ValueError(
            f"vocabulary_size must be at least {len(reserved_tokens) + 256} "
            f"(the reserved tokens and 256 bytes), got {vocabulary_size}"
        )
    byte_values, characters = bytes_to_unicode()
    byte_to_char = {b[0]: c for b, c in zip(byte_values, characters)}
    word_counts = collections.Counter()
    texts = list(texts)
    for start in range(0, len(texts), 1024):
        words = split_strings_for_bpe(texts[start:start + 1024], reserved_tokens)
        for word in words.flat_values.numpy().tolist():
            if word.decode("utf-8") not in reserved_tokens:
                word_counts["".join(byte_to_char[b] for b in word)] += 1
    vocabulary = {token: i for i, token in enumerate(reserved_tokens)}
    for character in sorted(characters):
        vocabulary.setdefault(character, len(vocabulary))
    merges = _learn_merges(word_counts, vocabulary, vocabulary_size, min_frequency)
    return keras_hub.tokenizers.BytePairTokenizer(
        vocabulary=vocabulary,
        merges=merges,
        unsplittable_tokens=reserved_tokens,
    )


def _learn_merges(word_counts, vocabulary, vocabulary_size, min_frequency):
    """The BPE merge loop, with incremental pair counts and a lazy max-heap.

    Adds each merged token to `vocabulary` (in place) and returns the merges
    as `"left right"` strings, in order.
    """
    words = [list(word) for word in word_counts]
    counts = list(word_counts.values())
    pair_counts = collections.Counter()
    pair_words = collections.defaultdict(set)  # pair -> indices of words
    for index, (symbols, count) in enumerate(zip(words, counts)):
        for pair in zip(symbols, symbols[1:]):
            pair_counts[pair] += count
            pair_words[pair].add(index)
    heap = [(-count, pair) for pair, count in pair_counts.items()]
    heapq.heapify(heap)
    merges = []
    while len(vocabulary) < vocabulary_size and heap:
        negative_count, pair = heapq.heappop(heap)
        if -negative_count != pair_counts.get(pair, 0):
            continue  # A stale entry; the pair's current count is pushed too.
        if -negative_count < min_frequency:
            break
        merged = pair[0] + pair[1]
        merges.append(f"{pair[0]} {pair[1]}")
        vocabulary.setdefault(merged, len(vocabulary))
        changed = set()
        for index in pair_words.pop(pair):
            symbols, count = words[index], counts[index]
            for old in zip(symbols, symbols[1:]):
                pair_counts[old] -= count
                changed.add(old)
            new_symbols, i = [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
                    new_symbols.append(merged)
                    i += 2
                else:
                    new_symbols.append(symbols[i])
                    i += 1
            words[index] = new_symbols
            for new in zip(new_symbols, new_symbols[1:]):
                pair_counts[new] += count
                pair_words[new].add(index)
                changed.add(new)
        for changed_pair in changed:
            count = pair_counts[changed_pair]
            if count <= 0:
                pair_counts.pop(changed_pair)
                pair_words.pop(changed_pair, None)
            elif changed_pair != pair:
                heapq.heappush(heap, (-count, changed_pair))
    return merges
