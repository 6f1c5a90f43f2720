"""What the char and word tokenizers share: keras-hub's tokenizer surface
over a NumPy vocabulary, saved as an asset of the `.keras` file."""

from pathlib import Path

import numpy as np

from zoo.tokenizers.text_tokenizer import TextTokenizer


class VocabularyTokenizer(TextTokenizer):
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
