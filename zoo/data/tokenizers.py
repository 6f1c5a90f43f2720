"""Tokenizers: characters, words, and keras-hub's WordPiece and byte-pair.

`CharVocabulary` (nanoGPT's character level) and `WordVocabulary` (for the
synthetic tasks) are small NumPy classes; `CharTokenizer` and
`WordTokenizer` are the same vocabularies as Keras layers with keras-hub's
tokenizer surface (`tokenize`, `detokenize`, `vocabulary_size()`, ...), so
that a model can carry them inside its `.keras` file
(`zoo.build(..., tokenizer=CharTokenizer.from_text(text))`). Subword
tokenizers are keras-hub's own layers,
`keras_hub.tokenizers.WordPieceTokenizer` and
`keras_hub.tokenizers.BytePairTokenizer`, not written again; this file only
trains their vocabularies and saves / loads them. keras-hub is imported
inside the functions that need it, so that `import zoo.data` stays light.

In every vocabulary here with a padding token, it has id 0, so that padded
batches,
`padding_mask = token_ids != 0` and `ignore_class=0` losses agree.

Example:
```python
chars = CharVocabulary.from_text(text)
ids = chars.encode(text)  # (N,) int32
tokenizer = train_word_piece(sentences, vocabulary_size=8000)
tokenizer("the cat danced")  # int32 ids
```
"""

import collections
import heapq
import json
import re
from pathlib import Path

import keras
import numpy as np

from zoo.data.chat import CHATML_TOKENS, render_template
from zoo.data.errors import DataError
from zoo.data.text_tokenizer import TextTokenizer
from zoo.files import write_text

WORD_PIECE_RESERVED_TOKENS = (
    "[PAD]",
    "[UNK]",
    "[START]",
    "[END]",
    "[MASK]",
    "[CLS]",
    "[SEP]",
)
BYTE_PAIR_RESERVED_TOKENS = ("[PAD]", "[START]", "[END]")


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
        return cls(_load_json(path, "characters"), _load_json(path, "special_tokens", default=[]))


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
        return cls(_load_json(path, "words"))


class _VocabularyTokenizer(TextTokenizer):
    """keras-hub's tokenizer surface over a NumPy vocabulary, as a Keras layer.

    The vocabulary is saved as an asset (`save_assets` / `load_assets`),
    not in the config, as keras-hub's tokenizers do: inside a model's
    `.keras` file it travels as a file and comes back when the model loads.
    Tokenizing runs in NumPy, eagerly; it is not meant for a traced graph.
    """

    asset_file = None  # the vocabulary file's name inside the assets folder
    vocabulary_class = None

    def __init__(self, vocabulary=None, **kwargs):
        kwargs.setdefault("trainable", False)
        super().__init__(**kwargs)
        self.vocabulary = None
        self.set_vocabulary(vocabulary)

    def set_vocabulary(self, vocabulary):
        """Sets the vocabulary: a `vocabulary_class` instance, what its
        constructor takes, a path to the file its `save` wrote, or None."""
        if vocabulary is None or isinstance(vocabulary, self.vocabulary_class):
            self.vocabulary = vocabulary
        elif isinstance(vocabulary, Path) or (isinstance(vocabulary, str) and vocabulary.endswith(".json")):
            self.vocabulary = self.vocabulary_class.load(vocabulary)
        else:
            self.vocabulary = self.vocabulary_class(vocabulary)

    def _checked(self):
        if self.vocabulary is None:
            raise ValueError(
                f"{type(self).__name__} has no vocabulary yet; pass `vocabulary=` or call `set_vocabulary`."
            )
        return self.vocabulary

    def encode_texts(self, texts):
        vocabulary = self._checked()
        return [np.asarray(vocabulary.encode(text), dtype=np.int32) for text in texts]

    def decode_rows(self, rows):
        vocabulary = self._checked()
        return [self._decode(vocabulary, np.asarray(row, dtype=np.int64)) for row in rows]

    def _decode(self, vocabulary, ids):
        return vocabulary.decode(ids)

    def vocabulary_size(self):
        """int. The number of token ids."""
        return self._checked().vocabulary_size

    def get_vocabulary(self):
        """The tokens, a list of str in id order."""
        return list(self._tokens())

    def id_to_token(self, id):
        """The token of an id."""
        tokens = self._tokens()
        if not 0 <= int(id) < len(tokens):
            raise ValueError(f"id {id} is out of range; expected an id in [0, {len(tokens)}).")
        return tokens[int(id)]

    def token_to_id(self, token):
        """The id of a token."""
        tokens = self._tokens()
        if token not in tokens:
            raise ValueError(f"token {token!r} is not in the vocabulary of {len(tokens)} tokens.")
        return tokens.index(token)

    def save_assets(self, dir_path):
        self._checked().save(Path(dir_path) / self.asset_file)

    def load_assets(self, dir_path):
        self.vocabulary = self.vocabulary_class.load(Path(dir_path) / self.asset_file)

    def get_config(self):
        config = super().get_config()
        config["vocabulary"] = None  # saved as an asset
        return config


@keras.saving.register_keras_serializable(package="zoo")
class CharTokenizer(_VocabularyTokenizer):
    """A character tokenizer (nanoGPT's), as a Keras layer a model can carry.

    The same ids as `CharVocabulary`, with keras-hub's tokenizer methods.
    Saved inside a model's `.keras` file as the asset `chars.json`.

    It chats as a `HuggingFaceTokenizer` does (`render_chat`,
    `tokenize_chat`, `apply_chat_template`) once its vocabulary holds the
    markers its `chat_template` writes as special tokens: ChatML's
    (`zoo.data.CHATML`, the template of a model trained from scratch) with
    `with_special_tokens(zoo.data.CHATML_TOKENS)`. `<|im_end|>` is then its
    end token (`end_token_ids`), where `zoo.generate` on text and `zoo
    serve` stop; `detokenize` leaves the special tokens out, as
    transformers' `skip_special_tokens`.

    Args:
        vocabulary: a `CharVocabulary`, a str or sequence of distinct
            characters in id order, a path to a `chars.json` written by
            `CharVocabulary.save`, or None (set later, e.g. when loading).
        chat_template: a Jinja chat template (str), or None.

    Example:
    ```python
    tokenizer = CharTokenizer.from_text("hello world")
    tokenizer("hold")  # array([3, 5, 4, 1], dtype=int32)
    tokenizer.detokenize([3, 5, 4, 1])  # "hold"
    lm = zoo.build("gpt-nano", "causal_lm", vocabulary_size=tokenizer.vocabulary_size(), tokenizer=tokenizer)
    chat = CharTokenizer.from_text("user\nassistant\nhello").with_special_tokens(zoo.data.CHATML_TOKENS)
    chat.chat_template = zoo.data.CHATML  # the markers are ids 12 and 13, after the 12 characters
    chat.apply_chat_template([{"role": "user", "content": "hello"}])  # [12, 11, 9, 2, 8, 0, 3, 2, 5, 5, 7, 13, 0, 12, ...]
    ```
    """

    asset_file = "chars.json"
    vocabulary_class = CharVocabulary

    def __init__(self, vocabulary=None, chat_template=None, **kwargs):
        super().__init__(vocabulary, **kwargs)
        if chat_template is not None and not isinstance(chat_template, str):
            raise ValueError(f"chat_template: expected a Jinja template (a str) or None; got {type(chat_template).__name__}.")
        self.chat_template = chat_template

    @classmethod
    def from_text(cls, text, **kwargs):
        """The tokenizer of the sorted characters of `text`."""
        return cls(CharVocabulary.from_text(text), **kwargs)

    def with_special_tokens(self, tokens):
        """This tokenizer with `tokens` appended as special tokens, those it
        lacks, after its ids (which keep their meaning), and its template.

        Args:
            tokens: a sequence of str, e.g. `zoo.data.CHATML_TOKENS`.

        Returns:
            A `CharTokenizer`.
        """
        vocabulary = self._checked()
        added = [t for t in tokens if t not in vocabulary.special_tokens]
        return CharTokenizer(CharVocabulary(vocabulary.characters, vocabulary.special_tokens + added),
                             chat_template=self.chat_template)

    @property
    def special_tokens(self):
        """The special tokens, a list of str in id order (after the characters)."""
        return list(self._checked().special_tokens)

    @property
    def end_token_ids(self):
        """A tuple of int: the id of ChatML's `<|im_end|>`, the end of a turn,
        when the vocabulary has it; else empty."""
        return tuple(self.token_to_id(t) for t in CHATML_TOKENS[1:] if t in self.special_tokens)

    @property
    def end_token_id(self):
        """int or None. The first of `end_token_ids`."""
        return self.end_token_ids[0] if self.end_token_ids else None

    def render_chat(self, messages, add_generation_prompt=True, chat_template=None):
        """A conversation's text, rendered by `chat_template` (a Jinja
        template) when given, else the tokenizer's own."""
        chat_template = chat_template or self.chat_template
        if chat_template is None:
            raise ValueError("the tokenizer has no chat template; expected zoo.data.CHATML, the template of a model "
                             "trained from scratch (`tokenizer.chat_template = zoo.data.CHATML`)")
        return render_template(chat_template, messages, add_generation_prompt)

    def tokenize_chat(self, text):
        """The ids of a rendered conversation and where each id is in it.

        Args:
            text: str, a conversation rendered by the chat template.

        Returns:
            `(ids, offsets)`: a list of int ids and a list of `(start, end)`
            character spans in `text`, one per id.

        Raises:
            DataError: a character of `text` is not in the vocabulary (a
                marker the template writes that is not a special token).
        """
        try:
            ids, offsets = self._checked().encode_with_offsets(text)
        except DataError as error:
            raise DataError(f"{error}; a chat template's markers must be special tokens "
                            "(`with_special_tokens(zoo.data.CHATML_TOKENS)` for ChatML)") from None
        return ids.tolist(), [tuple(span) for span in offsets.tolist()]

    def apply_chat_template(self, messages, add_generation_prompt=True):
        """The ids of a conversation rendered by the chat template.

        Args:
            messages: a list of {"role": str, "content": str} dicts.
            add_generation_prompt: end with the start of an assistant turn.

        Returns:
            A list of int ids.
        """
        return self.tokenize_chat(self.render_chat(messages, add_generation_prompt))[0]

    def _decode(self, vocabulary, ids):
        return vocabulary.decode(ids, skip_special_tokens=True)

    def _tokens(self):
        vocabulary = self._checked()
        return vocabulary.characters + vocabulary.special_tokens

    def get_config(self):
        config = super().get_config()
        config["chat_template"] = self.chat_template
        return config


@keras.saving.register_keras_serializable(package="zoo")
class WordTokenizer(_VocabularyTokenizer):
    """A whitespace word tokenizer, as a Keras layer a model can carry.

    The same ids as `WordVocabulary` (`[PAD]` 0, `[START]` 1, `[END]` 2,
    `[UNK]` 3, then the words); `detokenize` skips `[PAD]` and `[START]`
    and stops at `[END]`, as `WordVocabulary.decode`. Saved inside a
    model's `.keras` file as the asset `vocabulary.json`.

    Args:
        vocabulary: a `WordVocabulary`, a sequence of distinct words (the
            special tokens are added in front), a path to a JSON file
            written by `WordVocabulary.save`, or None.

    Example:
    ```python
    tokenizer = WordTokenizer.from_texts(["the cat danced", "the dog"])
    tokenizer("the dog danced")  # array([7, 6, 5], dtype=int32)
    tokenizer.detokenize([1, 7, 6, 2, 0])  # "the dog"
    ```
    """

    asset_file = "vocabulary.json"
    vocabulary_class = WordVocabulary
    pad_token_id, start_token_id, end_token_id, unk_token_id = 0, 1, 2, 3
    pad_token, start_token, end_token, unk_token = WordVocabulary.SPECIAL_TOKENS

    @classmethod
    def from_texts(cls, texts, **kwargs):
        """The tokenizer of the sorted words of `texts`."""
        return cls(WordVocabulary.from_texts(texts), **kwargs)

    def _tokens(self):
        return self._checked().tokens


def train_word_piece(
    texts,
    vocabulary_size,
    lowercase=True,
    reserved_tokens=WORD_PIECE_RESERVED_TOKENS,
):
    """Trains a WordPiece vocabulary with keras-hub and returns its tokenizer.

    Uses `keras_hub.tokenizers.compute_word_piece_vocabulary`; the reserved
    tokens come first, so `"[PAD]"` has id 0.

    Args:
        texts: a list of str.
        vocabulary_size: int. The largest vocabulary size; the trainer may
            return fewer tokens on a small corpus.
        lowercase: bool. Lowercase the text before training and tokenizing.
        reserved_tokens: a sequence of str, starting with `"[PAD]"` and holding
            `"[UNK]"`, the out-of-vocabulary token.

    Returns:
        A `keras_hub.tokenizers.WordPieceTokenizer`.
    """
    import keras_hub
    import tensorflow as tf

    reserved_tokens = list(reserved_tokens)
    if reserved_tokens[:1] != ["[PAD]"] or "[UNK]" not in reserved_tokens:
        raise ValueError(
            "reserved_tokens must start with '[PAD]' (id 0) and hold '[UNK]', "
            f"got {reserved_tokens}"
        )
    data = tf.data.Dataset.from_tensor_slices(list(texts)).batch(1024)
    vocabulary = keras_hub.tokenizers.compute_word_piece_vocabulary(
        data,
        vocabulary_size,
        lowercase=lowercase,
        reserved_tokens=reserved_tokens,
    )
    return keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=vocabulary, lowercase=lowercase, oov_token="[UNK]"
    )


def token_id_lists(tokenizer, texts):
    """A keras-hub tokenizer's ids for each text, as Python lists of ints
    (its output is a tf.RaggedTensor on TensorFlow)."""
    rows = tokenizer(texts)
    rows = rows.to_list() if hasattr(rows, "to_list") else rows
    return [list(map(int, row)) for row in rows]


def save_vocabulary(tokenizer, path):
    """Writes a WordPiece tokenizer's vocabulary, one token a line.

    Args:
        tokenizer: a `keras_hub.tokenizers.WordPieceTokenizer`.
        path: str or `pathlib.Path`, e.g. `"runs/bert/vocabulary.txt"`.
    """
    tokens = tokenizer.get_vocabulary()
    write_text(path, "\n".join(tokens) + "\n")


def load_word_piece(path, lowercase=True):
    """Rebuilds a WordPiece tokenizer from a file written by `save_vocabulary`.

    Args:
        path: str or `pathlib.Path`.
        lowercase: bool. Must match the value used in `train_word_piece`;
            the vocabulary file does not record it.

    Returns:
        A `keras_hub.tokenizers.WordPieceTokenizer` that tokenizes and
        detokenizes as the saved one did.
    """
    import keras_hub

    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: does not exist; expected a vocabulary file")
    tokens = path.read_text(encoding="utf-8").split("\n")
    while tokens and not tokens[-1]:
        tokens.pop()
    if not tokens or tokens[0] != "[PAD]":
        raise DataError(f"{path}, line 1: expected '[PAD]', the padding token")
    return keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=tokens, lowercase=lowercase, oov_token="[UNK]"
    )


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


def _load_json(path, key, default=None):
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: does not exist; expected a vocabulary file")
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        return saved[key] if default is None else saved.get(key, default)
    except (ValueError, KeyError, TypeError, AttributeError):
        raise DataError(
            f"{path}: expected a JSON object with a {key!r} list"
        ) from None
