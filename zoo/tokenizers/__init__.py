"""Tokenizers: text to token ids and back, as Keras layers a model carries
inside its `.keras` file.

The zoo's own: `CharTokenizer` (nanoGPT's characters, over
`CharVocabulary`), `WordTokenizer` (whitespace words, over
`WordVocabulary`), `HuggingFaceTokenizer` (a checkpoint's
`tokenizer.json`, run by the `tokenizers` package), `MarianTokenizer` and
`T5Tokenizer` (a SentencePiece model, run by the `sentencepiece` package),
all with keras-hub's tokenizer surface (`TextTokenizer`). Subword
vocabularies are trained by the ecosystem's trainers: keras-hub's
WordPiece (`train_word_piece`), the `tokenizers` package's byte-pair
(`train_byte_pair`, for keras-hub's `BytePairTokenizer`) and unigram or
BPE in SentencePiece's scheme (`train_sentence_piece`). Chat templates
render as transformers renders them (`render_template`, `CHATML`).

Imports only Keras and NumPy: keras-hub, TensorFlow, `tokenizers`,
`sentencepiece` and jinja2 are imported by the functions that need them,
so that `import zoo`, which registers these classes with Keras'
serialization, stays light.

In every vocabulary here with a padding token, it has id 0, so that padded
batches, `padding_mask = token_ids != 0` and `ignore_class=0` losses agree.

Example:
```python
chars = CharVocabulary.from_text(text)
ids = chars.encode(text)  # (N,) int32
tokenizer = train_word_piece(sentences, vocabulary_size=8000)
tokenizer("the cat danced")  # int32 ids
```
"""

from zoo.tokenizers.byte_pair import BYTE_PAIR_RESERVED_TOKENS, train_byte_pair
from zoo.tokenizers.char_tokenizer import CharTokenizer
from zoo.tokenizers.char_vocabulary import CharVocabulary
from zoo.tokenizers.chat_template import CHATML, CHATML_TOKENS, render_template
from zoo.tokenizers.huggingface_tokenizer import HuggingFaceTokenizer
from zoo.tokenizers.marian_tokenizer import MarianTokenizer
from zoo.tokenizers.sentence_piece import SENTENCE_PIECE_ALGORITHMS, SENTENCE_PIECE_RESERVED_TOKENS, train_sentence_piece
from zoo.tokenizers.t5_tokenizer import T5Tokenizer, t5_vocabulary
from zoo.tokenizers.text_tokenizer import TextTokenizer, token_id_lists
from zoo.tokenizers.vocabulary_tokenizer import VocabularyTokenizer
from zoo.tokenizers.word_piece import WORD_PIECE_RESERVED_TOKENS, load_word_piece, save_vocabulary, train_word_piece
from zoo.tokenizers.word_tokenizer import WordTokenizer
from zoo.tokenizers.word_vocabulary import WordVocabulary

__all__ = [
    "BYTE_PAIR_RESERVED_TOKENS",
    "CHATML",
    "CHATML_TOKENS",
    "SENTENCE_PIECE_ALGORITHMS",
    "SENTENCE_PIECE_RESERVED_TOKENS",
    "WORD_PIECE_RESERVED_TOKENS",
    "CharTokenizer",
    "CharVocabulary",
    "HuggingFaceTokenizer",
    "MarianTokenizer",
    "T5Tokenizer",
    "TextTokenizer",
    "VocabularyTokenizer",
    "WordTokenizer",
    "WordVocabulary",
    "load_word_piece",
    "render_template",
    "save_vocabulary",
    "t5_vocabulary",
    "token_id_lists",
    "train_byte_pair",
    "train_sentence_piece",
    "train_word_piece",
]
