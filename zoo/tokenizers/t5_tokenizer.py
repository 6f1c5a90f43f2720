"""T5's tokenizer (t5-small, google/flan-t5-*): `spiece.model` with the ids
of transformers' `T5Tokenizer`.

1. the special tokens written in the text (`</s>`, `<pad>`, `<unk>` and
   the sentinels `<extra_id_0>` .. `<extra_id_99>`) are their own tokens;
   the whitespace on either side of a sentinel is dropped (its
   `lstrip`/`rstrip`);
2. each stretch of text between them is cut by the `sentencepiece`
   package itself (`SentencePieceProcessor.encode(text, out_type=str)`,
   the tokenizer's legacy mode), each piece its id in the model;
3. `</s>` is appended.

The ids are the SentencePiece model's (`<pad>` 0, `</s>` 1, `<unk>` 2),
then the 100 sentinels, `<extra_id_0>` last. Decoding skips the special
tokens and the sentinels (`skip_special_tokens=True`). The decoder of a
T5 model starts from `<pad>`.

Example:
```python
tokenizer = T5Tokenizer.from_folder("flan-t5-small")
tokenizer("translate English to German: How old are you?")  # int32 ids, </s> (id 1) last
tokenizer.token_to_id("<extra_id_0>")  # 32099: the last id
```
"""

import re
from pathlib import Path

import keras

from zoo.tokenizers.marian_tokenizer import UNKNOWN, MarianTokenizer

EXTRA_IDS = 100
SENTINEL = re.compile(r"<extra_id_\d+>")
SPECIAL = re.compile(r"(<extra_id_\d+>|</s>|<pad>|<unk>)")


def t5_vocabulary(proto, extra_ids=EXTRA_IDS):
    """T5Tokenizer's {token: id}: the SentencePiece model's pieces by their ids, then `<extra_id_n>`
    at id size + extra_ids - 1 - n."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor()
    processor.LoadFromSerializedProto(bytes(proto))
    size = processor.get_piece_size()
    vocabulary = {processor.id_to_piece(i): i for i in range(size)}
    vocabulary.update({f"<extra_id_{n}>": size + extra_ids - 1 - n for n in range(extra_ids)})
    return vocabulary


@keras.saving.register_keras_serializable(package="zoo")
class T5Tokenizer(MarianTokenizer):
    """T5's tokenizer: a `MarianTokenizer` over `spiece.model`'s pieces and
    the sentinels, with T5Tokenizer's rules for the special tokens in the
    text (see the module's docstring).

    Args:
        proto: the SentencePiece model (`spiece.model`): a path or bytes.
        vocabulary: {token: id}; `t5_vocabulary(proto)` when None.
        start_token_id, add_end, generation: as in `MarianTokenizer`.

    Example: see the module's.
    """

    def __init__(self, proto=None, vocabulary=None, **kwargs):
        if proto is not None and vocabulary is None:
            proto = Path(proto).read_bytes() if isinstance(proto, (str, Path)) else bytes(proto)
            vocabulary = t5_vocabulary(proto)
        super().__init__(proto, vocabulary, **kwargs)

    @classmethod
    def from_folder(cls, folder, start_token_id=None, generation=None):
        """The tokenizer of a T5 checkpoint folder: its `spiece.model`."""
        return cls(Path(folder) / "spiece.model", start_token_id=start_token_id, generation=generation)

    def pieces(self, text):
        """The tokens of one text: the special tokens written in it, and the SentencePiece pieces of the rest."""
        processor = self._checked()
        parts = SPECIAL.split(text)  # text, special, text, ..., text
        for i in range(1, len(parts), 2):
            if SENTINEL.fullmatch(parts[i]):  # the sentinels' lstrip and rstrip
                parts[i - 1], parts[i + 1] = parts[i - 1].rstrip(), parts[i + 1].lstrip()
        pieces = []
        for i, part in enumerate(parts):
            if i % 2:
                pieces.append(part)
            elif part:
                pieces += processor.encode(part, out_type=str)
        return pieces

    def decode_rows(self, rows):
        """The texts of `rows`, the special tokens and the sentinels skipped."""
        processor = self._checked()
        sentinels = processor.get_piece_size()
        skipped = {self.end_token_id, self.pad_token_id, self.unknown_token_id}
        texts = []
        for row in rows:
            pieces = [self._tokens.get(i, UNKNOWN) for i in row if i not in skipped and int(i) < sentinels]
            texts.append(processor.decode_pieces(pieces).replace("\u2581", " ").strip())
        return texts

