"""What the zoo's own tokenizers share: keras-hub's tokenizer surface over a
tokenizer that runs in Python.

`TextTokenizer` takes what a user hands a keras-hub tokenizer (a str,
bytes, a list or array of them; one sequence of ids or several, as lists,
arrays or a ragged tensor), turns it into Python strings or lists of ids,
and hands those to its subclass's `encode_texts` / `decode_rows`. It runs
eagerly, in NumPy: it is not meant for a traced graph.
"""

import keras
import numpy as np


class TextTokenizer(keras.layers.Layer):
    """A Keras layer with keras-hub's `tokenize` / `detokenize` /
    `__call__`; subclasses say how to encode and decode.

    Subclasses implement:
        encode_texts(texts): a list of str -> a list of int32 arrays (T,).
        decode_rows(rows): a list of lists of int -> a list of str.
    """

    def encode_texts(self, texts):
        raise NotImplementedError

    def decode_rows(self, rows):
        raise NotImplementedError

    def tokenize(self, inputs):
        """Text to ids.

        Args:
            inputs: a str, or a list of str.

        Returns:
            For a str, an int32 array (T,); for a list, a list of them.
        """
        if isinstance(inputs, bytes):
            inputs = inputs.decode("utf-8")
        texts = [inputs] if isinstance(inputs, str) else python_strings(inputs)
        rows = self.encode_texts(texts)
        return rows[0] if isinstance(inputs, str) else rows

    def call(self, inputs):
        return self.tokenize(inputs)

    def __call__(self, inputs, *args, **kwargs):
        # Strings are not tensors: tokenize directly, without Keras' call machinery.
        return self.tokenize(inputs)

    def detokenize(self, inputs):
        """Ids to text.

        Args:
            inputs: one sequence of ids (a list or a 1-D array), or several
                (a list of lists or a 2-D array).

        Returns:
            A str for one sequence, a list of str for several.
        """
        rows, single = id_rows(inputs)
        texts = self.decode_rows(rows)
        return texts[0] if single else list(texts)


def python_strings(inputs):
    """A list of Python str from a list, tuple or array of str or bytes."""
    if hasattr(inputs, "numpy"):
        inputs = inputs.numpy()
    if isinstance(inputs, np.ndarray):
        inputs = inputs.reshape(-1).tolist()
    texts = []
    for text in inputs:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        if not isinstance(text, str):
            raise TypeError(f"expected text (a str or a list of str); got an element of type {type(text).__name__}.")
        texts.append(text)
    return texts


def id_rows(inputs):
    """Lists of Python ints from one sequence of ids or several, and whether
    it was one."""
    if hasattr(inputs, "to_list"):  # a tf.RaggedTensor
        inputs = inputs.to_list()
    if not isinstance(inputs, (list, tuple)):
        inputs = np.asarray(keras.ops.convert_to_numpy(inputs))
    if isinstance(inputs, np.ndarray):
        if inputs.ndim <= 1:
            return [inputs.reshape(-1).astype(np.int64).tolist()], True
        return [row.astype(np.int64).tolist() for row in inputs.reshape(-1, inputs.shape[-1])], False
    if len(inputs) and not np.isscalar(inputs[0]):
        return [np.asarray(row, dtype=np.int64).reshape(-1).tolist() for row in inputs], False
    return [np.asarray(inputs, dtype=np.int64).reshape(-1).tolist()], True


def token_id_lists(tokenizer, texts):
    """A keras-hub tokenizer's ids for each text, as Python lists of ints
    (its output is a tf.RaggedTensor on TensorFlow)."""
    rows = tokenizer(texts)
    rows = rows.to_list() if hasattr(rows, "to_list") else rows
    return [list(map(int, row)) for row in rows]
