"""Synthetic tasks that need no download: digit copying, reversing, sorting,
a toy English to German grammar, and word reordering as chat conversations.

Every task is deterministic given its seed. The digit tasks return token ids
ready for `seq2seq_dataset`, with a `WordVocabulary` of the digits; the toy
translation returns sentences, to be tokenized like a real corpus.

Shapes: N is the number of examples, T the sequence length.

Example:
```python
task = reverse_task(num_examples=2000, sequence_length=8, seed=0)
dataset = seq2seq_dataset(task.source_ids, task.target_ids, 32, 8, 9,
                          task.vocabulary.start_id, task.vocabulary.end_id)
english, german = toy_translation(num_pairs=5000, seed=0)
(train_en, train_de), (test_en, test_de) = held_out_split(english, german, 0.1)
```
"""

import itertools
from typing import NamedTuple

import numpy as np

from zoo.tokenizers.word_vocabulary import WordVocabulary

DIGITS = tuple(str(d) for d in range(10))


class Task(NamedTuple):
    """A synthetic sequence-to-sequence task.

    Attributes:
        source_ids: int32 array (N, T), the source digits as token ids.
        target_ids: int32 array (N, T), the target digits as token ids,
            without start or end tokens.
        vocabulary: the `WordVocabulary` of the ten digits.
    """

    source_ids: np.ndarray
    target_ids: np.ndarray
    vocabulary: WordVocabulary


def copy_task(num_examples, sequence_length, seed=0):
    """Target = source: the simplest check that attention can look back.
    A `Task` of `num_examples` (N) sequences of `sequence_length` (T)
    random digits drawn with `seed`."""
    return _digit_task(num_examples, sequence_length, seed, lambda x: x)


def reverse_task(num_examples, sequence_length, seed=0):
    """Target = source reversed: needs attention to far positions.
    A `Task` of `num_examples` (N) sequences of `sequence_length` (T)
    random digits drawn with `seed`."""
    return _digit_task(num_examples, sequence_length, seed, lambda x: x[:, ::-1])


def sort_task(num_examples, sequence_length, seed=0):
    """Target = source digits in ascending order: needs counting.
    A `Task` of `num_examples` (N) sequences of `sequence_length` (T)
    random digits drawn with `seed`."""
    return _digit_task(
        num_examples, sequence_length, seed, lambda x: np.sort(x, axis=1)
    )


def _digit_task(num_examples, sequence_length, seed, transform):
    vocabulary = WordVocabulary(DIGITS)
    first_digit = vocabulary.encode("0")[0]  # the digits' ids are consecutive
    rng = np.random.default_rng(seed)
    digits = rng.integers(0, 10, size=(num_examples, sequence_length))
    source = (digits + first_digit).astype(np.int32)
    target = (transform(digits) + first_digit).astype(np.int32)
    return Task(source, np.ascontiguousarray(target), vocabulary)


# The toy grammar: (English, German, gender) nouns, past-tense verbs, and
# adjectives with their declension stem ("müd" for "müde"). "the" is
# der/die/das by gender and the adjective after it ends in -e; "a" is
# ein/eine/ein and the adjective ends in -er/-e/-es (nominative singular,
# weak and mixed declension).
NOUNS = (
    ("cat", "Katze", "f"),
    ("dog", "Hund", "m"),
    ("child", "Kind", "n"),
    ("woman", "Frau", "f"),
    ("man", "Mann", "m"),
    ("bird", "Vogel", "m"),
    ("horse", "Pferd", "n"),
    ("mouse", "Maus", "f"),
    ("teacher", "Lehrer", "m"),
    ("girl", "Mädchen", "n"),
    ("boy", "Junge", "m"),
    ("king", "König", "m"),
    ("queen", "Königin", "f"),
    ("sheep", "Schaf", "n"),
    ("fish", "Fisch", "m"),
)
VERBS = (
    ("slept", "schlief"),
    ("danced", "tanzte"),
    ("laughed", "lachte"),
    ("sang", "sang"),
    ("ran", "lief"),
    ("swam", "schwamm"),
    ("waited", "wartete"),
    ("played", "spielte"),
    ("cried", "weinte"),
    ("jumped", "sprang"),
    ("smiled", "lächelte"),
)
ADJECTIVES = (
    ("small", "klein"),
    ("big", "groß"),
    ("old", "alt"),
    ("young", "jung"),
    ("happy", "glücklich"),
    ("tired", "müd"),
    ("quick", "schnell"),
)
ADVERBS = (("again", "wieder"), ("today", "heute"), ("quietly", "leise"))
_DEFINITE = {"m": "der", "f": "die", "n": "das"}
_INDEFINITE = {"m": "ein", "f": "eine", "n": "ein"}
_MIXED_ENDING = {"m": "er", "f": "e", "n": "es"}


def toy_translation_pairs():
    """Every sentence pair of the toy grammar, in a fixed order.

    A sentence is a determiner, an optional adjective, a noun, a verb in the
    past tense and an optional adverb: "the small dog slept" -> "der kleine
    Hund schlief", "a small child sang again" -> "ein kleines Kind sang
    wieder". There are 2 x 8 x 15 x 11 x 4 = 10,560 pairs.

    Returns:
        A list of `(english, german)` str pairs.
    """
    pairs = []
    for definite, adjective, noun, verb, adverb in itertools.product(
        (True, False), (None,) + ADJECTIVES, NOUNS, VERBS, (None,) + ADVERBS
    ):
        english_noun, german_noun, gender = noun
        english = ["the" if definite else "a"]
        german = [(_DEFINITE if definite else _INDEFINITE)[gender]]
        if adjective is not None:
            english.append(adjective[0])
            german.append(adjective[1] + ("e" if definite else _MIXED_ENDING[gender]))
        english += [english_noun, verb[0]]
        german += [german_noun, verb[1]]
        if adverb is not None:
            english.append(adverb[0])
            german.append(adverb[1])
        pairs.append((" ".join(english), " ".join(german)))
    return pairs


def toy_translation(num_pairs, seed=0):
    """Draws distinct sentence pairs from the toy English to German grammar.

    Args:
        num_pairs: int. At most the 10,560 pairs the grammar has.
        seed: int.

    Returns:
        `(english_sentences, german_sentences)`: two lists of `num_pairs` str,
        aligned, with no sentence twice.
    """
    pairs = toy_translation_pairs()
    if not 0 < num_pairs <= len(pairs):
        raise ValueError(
            f"num_pairs must be in [1, {len(pairs)}] (the grammar's size), "
            f"got {num_pairs}"
        )
    rng = np.random.default_rng(seed)
    chosen = rng.choice(len(pairs), size=num_pairs, replace=False)
    english = [pairs[i][0] for i in chosen]
    german = [pairs[i][1] for i in chosen]
    return english, german


def held_out_split(sources, targets, held_out_fraction=0.1, seed=0):
    """Splits pairs so that no held-out source sentence occurs in training.

    Splits by distinct source sentence, so repeated sentences all land on one
    side: a model evaluated on the held-out part translates sentences it has
    never seen.

    Args:
        sources: a list of str.
        targets: a list of str, aligned with `sources`.
        held_out_fraction: float in (0, 1). The share of distinct sources
            held out.
        seed: int.

    Returns:
        `((train_sources, train_targets), (held_out_sources,
        held_out_targets))`, four lists of str.
    """
    if len(sources) != len(targets):
        raise ValueError(
            f"Expected aligned lists, got {len(sources)} sources and "
            f"{len(targets)} targets."
        )
    distinct = sorted(set(sources))
    rng = np.random.default_rng(seed)
    count = int(round(held_out_fraction * len(distinct)))
    held_out = {distinct[i] for i in rng.choice(len(distinct), count, replace=False)}
    train, test = ([], []), ([], [])
    for source, target in zip(sources, targets):
        side = test if source in held_out else train
        side[0].append(source)
        side[1].append(target)
    return train, test


# Short words of lowercase letters for the chat tasks: every character is in
# Tiny Shakespeare, so a character model pretrained on it reads them all.
CHAT_WORDS = (
    "ant", "bee", "cat", "cow", "dog", "elk", "fox", "hen", "owl", "pig", "rat", "yak",
    "ash", "elm", "fig", "oak", "sun", "sky", "sea", "ice", "mud", "cup", "pen", "box",
    "key", "map", "bell", "bird", "boat", "cake", "coat", "door", "drum", "fish", "frog", "gold",
    "lamp", "leaf", "milk", "moon", "nest", "ring", "rock", "rose", "salt", "ship", "star", "wolf",
)
# What each chat task asks, and its answer to a list of words.
CHAT_TASKS = {
    "reverse": ("Reverse", lambda words: words[::-1]),
    "sort": ("Sort", sorted),
}


def word_order_chat(counts, task="reverse", num_words=3, words=CHAT_WORDS, seed=0):
    """An instruction task as chat conversations, in disjoint splits: the
    user gives a list of words ("Reverse: cat moon fig"), the assistant
    answers them reordered ("fig moon cat"; "Sort": alphabetically).

    Each prompt is a distinct sequence of `num_words` different words, drawn
    with `seed`, so no prompt occurs in two splits.

    Args:
        counts: a dict of split name to the number of conversations, e.g.
            `{"train": 4000, "validation": 200, "test": 200}`; the splits are
            drawn in this order.
        task: "reverse" or "sort".
        num_words: int >= 2, the words of a prompt.
        words: the distinct words drawn from.
        seed: int.

    Returns:
        A dict of split name to a list of conversations, each
        `{"messages": [{"role": "user", ...}, {"role": "assistant", ...}]}`
        (the OpenAI shape that `zoo.data.read_chat` reads).

    Example:
    ```python
    splits = word_order_chat({"train": 2, "test": 1}, seed=0)
    splits["test"][0]["messages"]  # [{"role": "user", "content": "Reverse: ..."}, {"role": "assistant", ...}]
    ```
    """
    if task not in CHAT_TASKS:
        raise ValueError(f"task: {task!r}; expected one of {', '.join(CHAT_TASKS)}")
    words = list(words)
    if len(set(words)) != len(words) or not 2 <= num_words <= len(words):
        raise ValueError(f"num_words: expected 2 to {len(words)} distinct words; got {num_words} of {len(words)}")
    total = sum(counts.values())
    available = np.prod(np.arange(len(words) - num_words + 1, len(words) + 1, dtype=np.float64))
    if total > available / 2:
        raise ValueError(f"counts: {total} conversations of {num_words} of {len(words)} words; expected at most "
                         f"{int(available // 2)}, half the distinct prompts")
    instruction, reorder = CHAT_TASKS[task]
    rng = np.random.default_rng(seed)
    drawn, seen = [], set()
    while len(drawn) < total:
        chosen = tuple(words[i] for i in rng.choice(len(words), num_words, replace=False))
        if chosen not in seen:
            seen.add(chosen)
            drawn.append(chosen)
    splits, start = {}, 0
    for name, count in counts.items():
        splits[name] = [
            {"messages": [{"role": "user", "content": f"{instruction}: {' '.join(chosen)}"},
                          {"role": "assistant", "content": " ".join(reorder(list(chosen)))}]}
            for chosen in drawn[start:start + count]
        ]
        start += count
    return splits
