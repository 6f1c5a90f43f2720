"""nanoGPT's character vocabulary, in NumPy."""

import json
import re

import numpy as np

from zoo.errors import DataError
from zoo.files import write_text
from zoo.tokenizers.vocabulary_file import read_vocabulary_file


class CharVocabulary:
    """A character vocabulary: the sorted set of characters seen, as nanoGPT,
    and optionally special tokens after them.

    Encoding and decoding are vectorised through a code point lookup table, so
    the 1 MB Tiny Shakespeare encodes in milliseconds. Character level models
    need no padding, so no padding token is added. A special token (ChatML's
    `<|im_start|>`, `<|im_end|>`) is a string of several characters that
    encodes to one id of its own, wherever it appears in a text; its ids
    follow the characters', so adding one keeps every character's id.

    Args:
        characters: a str or a sequence of distinct single characters, in id
            order (id i is `characters[i]`).
        special_tokens: a sequence of distinct strings of at least two
            characters; id `len(characters) + j` is `special_tokens[j]`.

    Example:
    ```python
    vocabulary = CharVocabulary.from_text("hello")
    vocabulary.encode("hell")  # array([1, 0, 2, 2], dtype=int32)
    vocabulary.decode([3, 1])  # "oh"
    chat = CharVocabulary("ehlo", special_tokens=["<|im_end|>"])
    chat.encode("oh<|im_end|>")  # array([3, 1, 4], dtype=int32)
    ```
    """

    def __init__(self, characters, special_tokens=()):
        characters = list(characters)
        special_tokens = list(special_tokens)
        if not characters:
            raise ValueError("A CharVocabulary needs at least one character.")
        if any(len(c) != 1 for c in characters):
            raise ValueError(f"Expected single characters, got {characters}.")
        if len(set(characters)) != len(characters):
            raise ValueError(f"Expected distinct characters, got {characters}.")
        if any(not isinstance(t, str) or len(t) < 2 for t in special_tokens) or len(set(special_tokens)) != len(
            special_tokens
        ):
            raise ValueError(f"special_tokens: expected distinct strings of at least two characters; got {special_tokens}.")
        self.characters = characters
        self.special_tokens = special_tokens
        self._code_points = np.array([ord(c) for c in characters], np.uint32)
        # table[code point] = id, or -1 for a character not in the vocabulary.
        self._table = np.full(int(self._code_points.max()) + 1, -1, np.int32)
        self._table[self._code_points] = np.arange(len(characters), dtype=np.int32)
        self._special_ids = {token: len(characters) + j for j, token in enumerate(special_tokens)}
        # The longest first, so that a token holding another is matched whole.
        alternatives = sorted(special_tokens, key=len, reverse=True)
        self._special_pattern = re.compile("|".join(map(re.escape, alternatives))) if special_tokens else None

    @classmethod
    def from_text(cls, text, special_tokens=()):
        """Builds the vocabulary of the characters in `text`, sorted.

        Args:
            text: str.
            special_tokens: as the constructor's.

        Returns:
            A `CharVocabulary`.
        """
        return cls(sorted(set(text)), special_tokens)

    @property
    def vocabulary_size(self):
        """int. The number of ids: the characters and the special tokens."""
        return len(self.characters) + len(self.special_tokens)

    def encode(self, text):
        """Encodes a text, one id per character and per special token.

        Args:
            text: str.

        Returns:
            An int32 array of shape (T,), T = len(text) without special tokens.

        Raises:
            DataError: a character of `text` is not in the vocabulary.
        """
        return self.encode_with_offsets(text)[0]

    def encode_with_offsets(self, text):
        """Encodes a text, and says where each id is in it.

        Args:
            text: str.

        Returns:
            `(ids, offsets)`: an int32 array (T,) and an int array (T, 2) of
            each id's `(start, end)` character span in `text`.

        Raises:
            DataError: a character of `text` is not in the vocabulary.
        """
        if self._special_pattern is None:
            ids = self._encode_characters(text, 0)
            starts = np.arange(len(ids))
            return ids, np.stack([starts, starts + 1], axis=1)
        pieces, spans, start = [], [], 0
        for match in self._special_pattern.finditer(text):
            pieces.append(self._encode_characters(text[start:match.start()], start))
            spans.append(np.stack([np.arange(start, match.start())] * 2, axis=1) + [0, 1])
            pieces.append(np.array([self._special_ids[match.group()]], np.int32))
            spans.append(np.array([[match.start(), match.end()]]))
            start = match.end()
        pieces.append(self._encode_characters(text[start:], start))
        spans.append(np.stack([np.arange(start, len(text))] * 2, axis=1) + [0, 1])
        return np.concatenate(pieces).astype(np.int32), np.concatenate(spans).reshape(-1, 2)

    def _encode_characters(self, text, offset):
        """The ids of `text`'s characters; `offset` is where `text` starts
        in the text the error names."""
        code_points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        in_table = code_points < len(self._table)
        ids = np.full(code_points.shape, -1, np.int32)
        ids[in_table] = self._table[code_points[in_table]]
        unknown = np.flatnonzero(ids < 0)
        if unknown.size:
            position = int(unknown[0])
            raise DataError(
                f"character {text[position]!r} at position {offset + position} is not "
                f"in the vocabulary of {len(self.characters)} characters; "
                f"expected only characters seen when the vocabulary was built"
            )
        return ids

    def decode(self, ids, skip_special_tokens=False):
        """Decodes ids back to text.

        Args:
            ids: a sequence or array of ints, each in [0, vocabulary_size).
            skip_special_tokens: bool; True leaves the special tokens out.

        Returns:
            str.
        """
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocabulary_size):
            raise DataError(
                f"CharVocabulary.decode: expected ids in "
                f"[0, {self.vocabulary_size}), got {ids.min()}..{ids.max()}"
            )
        special = ids >= len(self.characters)
        if not special.any():
            return self._code_points[ids].tobytes().decode("utf-32-le")
        text, start = [], 0
        for position in np.flatnonzero(special).tolist():
            text.append(self._code_points[ids[start:position]].tobytes().decode("utf-32-le"))
            if not skip_special_tokens:
                text.append(self.special_tokens[int(ids[position]) - len(self.characters)])
            start = position + 1
        text.append(self._code_points[ids[start:]].tobytes().decode("utf-32-le"))
        return "".join(text)

    def save(self, path):
        """Writes the vocabulary to a JSON file (a list of the characters,
        and one of the special tokens when there are any).

        Args:
            path: str or `pathlib.Path`, e.g. `"runs/shakespeare/chars.json"`.
        """
        saved = {"characters": self.characters}
        if self.special_tokens:
            saved["special_tokens"] = self.special_tokens
        write_text(path, json.dumps(saved, ensure_ascii=False))

    @classmethod
    def load(cls, path):
        """Reads a vocabulary written by `save`.

        Args:
            path: str or `pathlib.Path`.

        Returns:
            A `CharVocabulary`.
        """
        return cls(read_vocabulary_file(path, "characters"), read_vocabulary_file(path, "special_tokens", default=[]))
