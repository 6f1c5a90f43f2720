"""A whitespace word vocabulary, in NumPy, for the synthetic tasks."""

import json

import numpy as np

from zoo.files import write_text
from zoo.tokenizers.vocabulary_file import read_vocabulary_file


class WordVocabulary:
    """A word vocabulary split on whitespace, for the synthetic tasks.

    Ids 0 to 3 are `[PAD]`, `[START]`, `[END]` and `[UNK]`; the words follow
    in the order given. Words outside the vocabulary encode to `[UNK]`.

    Args:
        words: a sequence of distinct words (no whitespace), in id order after
            the four special tokens.

    Example:
    ```python
    vocabulary = WordVocabulary.from_texts(["the cat danced", "the dog"])
    vocabulary.encode("the dog danced")  # [7, 6, 5]
    vocabulary.decode([1, 7, 6, 2, 0])  # "the dog"
    ```
    """

    SPECIAL_TOKENS = ("[PAD]", "[START]", "[END]", "[UNK]")
    pad_id, start_id, end_id, unk_id = 0, 1, 2, 3

    def __init__(self, words):
        tokens = list(self.SPECIAL_TOKENS) + list(words)
        if len(set(tokens)) != len(tokens):
            raise ValueError("Expected distinct words, not special tokens.")
        self.tokens = tokens
        self._ids = {token: i for i, token in enumerate(tokens)}

    @classmethod
    def from_texts(cls, texts):
        """Builds the vocabulary of the words in `texts`, sorted.

        Args:
            texts: an iterable of str.

        Returns:
            A `WordVocabulary`.
        """
        words = set()
        for text in texts:
            words.update(text.split())
        return cls(sorted(words - set(cls.SPECIAL_TOKENS)))

    @property
    def vocabulary_size(self):
        """int. The number of tokens, special tokens included."""
        return len(self.tokens)

    def encode(self, text):
        """Encodes the words of a text, without start or end tokens.

        Args:
            text: str.

        Returns:
            A list of int.
        """
        return [self._ids.get(word, self.unk_id) for word in text.split()]

    def decode(self, ids):
        """Decodes ids to text, up to the first `[END]`.

        `[PAD]` and `[START]` are skipped, so a generated sequence
        `[START] w1 w2 [END] [PAD] ...` decodes to `"w1 w2"`.

        Args:
            ids: a sequence or array of ints.

        Returns:
            str.
        """
        words = []
        for i in np.asarray(ids).reshape(-1).tolist():
            if i == self.end_id:
                break
            if i not in (self.pad_id, self.start_id):
                words.append(self.tokens[i])
        return " ".join(words)

    def save(self, path):
        """Writes the words to a JSON file.

        Args:
            path: str or `pathlib.Path`.
        """
        write_text(path, json.dumps({"words": self.tokens[len(self.SPECIAL_TOKENS):]}, ensure_ascii=False))

    @classmethod
    def load(cls, path):
        """Reads a vocabulary written by `save`.

        Args:
            path: str or `pathlib.Path`.

        Returns:
            A `WordVocabulary`.
        """
        return cls(read_vocabulary_file(path, "words"))
