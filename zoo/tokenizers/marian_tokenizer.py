"""Marian's tokenizer (Helsinki-NLP/opus-mt-*): a SentencePiece model for
the pieces and `vocab.json` for their ids.

An opus-mt folder holds two SentencePiece models, `source.spm` for the
source language and `target.spm` for the target, and one `vocab.json`
mapping the pieces of both to the model's ids. `MarianTokenizer` is one
side: transformers' `MarianTokenizer` in its source mode (`source.spm`) or
target mode (`target.spm`), with the same ids:

1. a leading language code `>>xx<<` (the multilingual models' target
   language) is its own token;
2. the rest is cut into pieces by the `sentencepiece` package itself
   (`SentencePieceProcessor.encode(text, out_type=str)`);
3. each piece is its `vocab.json` id, `<unk>` for a piece not there;
4. `</s>` is appended.

Decoding skips `</s>`, `<pad>` and `<unk>` and joins the pieces back
(`decode_pieces`). The decoder of a Marian model starts from `<pad>`
(`start_token_id`, the checkpoint's `decoder_start_token_id`) and stops at
`</s>` (`end_token_id`). Inside a `.keras` file the SentencePiece model and
the vocabulary travel as the assets `sentencepiece.model` and `vocab.json`.

Example:
```python
source = MarianTokenizer.from_folder("opus-mt-de-en", "source")
target = MarianTokenizer.from_folder("opus-mt-de-en", "target")
source("Ein Mann fährt Fahrrad.")  # int32 ids, </s> (id 0) last
target.detokenize(target("A man rides a bike."))  # "A man rides a bike."
```
"""

import json
from pathlib import Path

import keras
import numpy as np

from zoo.errors import DataError
from zoo.tokenizers.text_tokenizer import TextTokenizer
from zoo.files import write_text

MODEL_ASSET, VOCABULARY_ASSET = "sentencepiece.model", "vocab.json"
SIDES = {"source": "source.spm", "target": "target.spm"}
UNKNOWN, END, PAD = "<unk>", "</s>", "<pad>"


@keras.saving.register_keras_serializable(package="zoo")
class MarianTokenizer(TextTokenizer):
    """One side of Marian's tokenizer, with keras-hub's tokenizer methods.

    Args:
        proto: the SentencePiece model: a path to a `.spm` / `.model`
            file or its bytes; None to set later (`set_model`, e.g. when a
            saved model loads).
        vocabulary: {piece: id}, or a path to a `vocab.json`.
        start_token_id: the decoder's first token; `<pad>`'s id when None
            (transformers' `decoder_start_token_id` for Marian).
        add_end: append `</s>` to each text (transformers does, on both sides).
        generation: the checkpoint's decoding settings (its
            `generation_config.json`: `num_beams`, `max_length`,
            `length_penalty`, `bad_words_ids`, `forced_eos_token_id`),
            which `zoo.translate` follows; saved with the tokenizer.

    Example: see the module's.
    """

    def __init__(self, proto=None, vocabulary=None, start_token_id=None, add_end=True, generation=None, **kwargs):
        kwargs.setdefault("trainable", False)
        super().__init__(**kwargs)
        self.add_end = bool(add_end)
        self.generation = dict(generation or {})
        self._start = start_token_id
        self._processor = self._proto = self._vocabulary = None
        if proto is not None or vocabulary is not None:
            self.set_model(proto, vocabulary)

    def set_model(self, proto, vocabulary):
        """Sets the SentencePiece model (a path or bytes) and the {piece: id}
        vocabulary (a dict or a path to a `vocab.json`).

        Raises:
            DataError: naming the file, for an unreadable model, a vocabulary
                that is not a {piece: id} object, one without `<unk>`,
                `</s>` and `<pad>`, or one that does not match the model's
                pieces.
        """
        import sentencepiece

        where = "the SentencePiece model"
        if isinstance(proto, (str, Path)):
            where = str(proto)
            if not Path(proto).is_file():
                raise DataError(f"{proto}: does not exist; expected a SentencePiece model")
            proto = Path(proto).read_bytes()
        vocabulary_file = "the vocabulary"
        if isinstance(vocabulary, (str, Path)):
            vocabulary_file = str(vocabulary)
            try:
                vocabulary = json.loads(Path(vocabulary).read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
                raise DataError(f"{vocabulary_file}: not a readable JSON vocabulary ({error})") from None
        if not isinstance(vocabulary, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
            for k, v in vocabulary.items()
        ):
            raise DataError(f"{vocabulary_file}: expected a {{piece: id}} object of non-negative int ids")
        missing = [t for t in (UNKNOWN, END, PAD) if t not in vocabulary]
        if missing:
            raise DataError(f"{vocabulary_file}: has no {missing[0]!r}; expected Marian's {UNKNOWN}, {END} and {PAD}")
        processor = sentencepiece.SentencePieceProcessor()
        try:
            processor.LoadFromSerializedProto(bytes(proto))
        except Exception as error:  # sentencepiece raises RuntimeError or OSError for a bad proto
            raise DataError(f"{where}: not a SentencePiece model ({str(error).strip() or type(error).__name__})") from None
        pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())
                  if not (processor.is_control(i) or processor.is_unknown(i))]
        known = sum(piece in vocabulary for piece in pieces)
        if pieces and known < len(pieces) / 2:
            raise DataError(
                f"{where}: only {known} of its {len(pieces)} pieces are in {vocabulary_file}; expected the "
                "vocabulary of the same checkpoint"
            )
        self._processor, self._proto, self._vocabulary = processor, bytes(proto), dict(vocabulary)
        self._tokens = {i: token for token, i in vocabulary.items()}
        self._size = max(vocabulary.values()) + 1
        start = self._vocabulary[PAD] if self._start is None else int(self._start)
        if not 0 <= start < self._size:
            raise ValueError(f"start_token_id: id {start} is out of range; the vocabulary has ids [0, {self._size}).")

    @classmethod
    def from_folder(cls, folder, side, start_token_id=None, generation=None):
        """The `side` ("source" or "target") of a Marian checkpoint folder:
        its `source.spm` or `target.spm`, and `vocab.json`."""
        if side not in SIDES:
            raise ValueError(f"side: expected 'source' or 'target'; got {side!r}.")
        folder = Path(folder)
        return cls(folder / SIDES[side], folder / VOCABULARY_ASSET, start_token_id=start_token_id,
                   generation=generation)

    def _checked(self):
        if self._processor is None:
            raise ValueError("MarianTokenizer has no SentencePiece model yet; pass `proto=` or call `set_model`.")
        return self._processor

    # --- Special ids ----------------------------------------------------------------

    def _special(self, token):
        self._checked()
        return self._vocabulary[token]

    @property
    def end_token_id(self):
        return self._special(END)

    @property
    def pad_token_id(self):
        return self._special(PAD)

    @property
    def unknown_token_id(self):
        return self._special(UNKNOWN)

    @property
    def start_token_id(self):
        return self.pad_token_id if self._start is None else int(self._start)

    # --- Keras-hub's tokenizer surface ----------------------------------------------

    def pieces(self, text):
        """The tokens of one text, before their ids: a leading `>>xx<<`
        language code, then the SentencePiece pieces."""
        processor = self._checked()
        code = []
        if text.startswith(">>") and (end := text.find("<<")) != -1:
            code, text = [text[: end + 2]], text[end + 2 :]
        return code + processor.encode(text, out_type=str)

    def encode_texts(self, texts):
        unknown, end = self.unknown_token_id, [self.end_token_id] if self.add_end else []
        return [np.asarray([self._vocabulary.get(p, unknown) for p in self.pieces(t)] + end, np.int32) for t in texts]

    def decode_rows(self, rows):
        """The texts of `rows`, `</s>`, `<pad>` and `<unk>` skipped."""
        processor = self._checked()
        skipped = {self.end_token_id, self.pad_token_id, self.unknown_token_id}
        texts = []
        for row in rows:
            pieces = [self._tokens.get(i, UNKNOWN) for i in row if i not in skipped]
            texts.append(processor.decode_pieces(pieces).replace("\u2581", " ").strip())
        return texts

    def vocabulary_size(self):
        """int. One more than the largest id of `vocab.json`."""
        self._checked()
        return self._size

    def get_vocabulary(self):
        """The tokens, a list of str in id order (an unused id is `""`)."""
        self._checked()
        return [self._tokens.get(i, "") for i in range(self._size)]

    def id_to_token(self, id):
        self._checked()
        if int(id) not in self._tokens:
            raise ValueError(f"id {id} is not in the vocabulary of {self._size} ids.")
        return self._tokens[int(id)]

    def token_to_id(self, token):
        self._checked()
        if token not in self._vocabulary:
            raise ValueError(f"token {token!r} is not in the vocabulary.")
        return self._vocabulary[token]

    @property
    def proto(self):
        """The SentencePiece model's bytes (what `source.spm` / `target.spm` hold)."""
        self._checked()
        return self._proto

    @property
    def vocabulary(self):
        """{piece: id}, what `vocab.json` holds."""
        self._checked()
        return dict(self._vocabulary)

    # --- Saving ---------------------------------------------------------------------

    def save_assets(self, dir_path):
        self._checked()
        (Path(dir_path) / MODEL_ASSET).write_bytes(self._proto)
        write_text(Path(dir_path) / VOCABULARY_ASSET, json.dumps(self._vocabulary, ensure_ascii=False))

    def load_assets(self, dir_path):
        self.set_model(Path(dir_path) / MODEL_ASSET, Path(dir_path) / VOCABULARY_ASSET)

    def get_config(self):
        config = super().get_config()
        config.update(proto=None, vocabulary=None, start_token_id=self._start, add_end=self.add_end,  # assets
                      generation=self.generation)
        return config
