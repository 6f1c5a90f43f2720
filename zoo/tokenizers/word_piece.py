"""WordPiece vocabularies for keras-hub's `WordPieceTokenizer`: trained by
keras-hub's `compute_word_piece_vocabulary`, saved one token a line.
keras-hub and TensorFlow are imported by the functions that need them.

Example:
```python
tokenizer = train_word_piece(sentences, vocabulary_size=8000)
tokenizer("the cat danced")  # int32 ids
```
"""

from pathlib import Path

from zoo.errors import DataError
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
