"""A whitespace word tokenizer as a Keras layer a model carries."""

import keras

from zoo.tokenizers.vocabulary_tokenizer import VocabularyTokenizer
from zoo.tokenizers.word_vocabulary import WordVocabulary


@keras.saving.register_keras_serializable(package="zoo")
class WordTokenizer(VocabularyTokenizer):
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
