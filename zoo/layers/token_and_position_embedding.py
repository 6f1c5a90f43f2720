"""Token embedding plus position (learned or sinusoidal), the input layer.

Shape letters: B batch, T length, d width, V vocabulary.
"""

import math

import keras
from keras import ops

from zoo.layers.initializers import fresh
from zoo.layers.position_embedding import PositionEmbedding
from zoo.layers.sinusoidal_position_encoding import SinusoidalPositionEncoding
from zoo.layers.token_embedding import TokenEmbedding

POSITIONS = ("learned", "sinusoidal", "sinusoidal_halves")


@keras.saving.register_keras_serializable(package="zoo")
class TokenAndPositionEmbedding(keras.layers.Layer):
    """Embeds token ids and adds their positions.

    Args:
        vocabulary_size: V.
        sequence_length: the maximum length (the size of a learned table).
        embedding_dim: d.
        position: "learned" (GPT, BERT), "sinusoidal" (the 2017 paper) or
            "sinusoidal_halves" (the same sines and cosines, the sines in
            the first half of the channels: Marian).
        mask_zero: id 0 is padding; the output carries a Keras mask.
        scale_embeddings: multiply token embeddings by sqrt(d), as the paper
            does (section 3.4) before adding the positions.
        embeddings_initializer: of the token table.
        position_initializer: of a learned position table.
        position_offset: rows of a learned table before position 0's
            (BART's 2; see `PositionEmbedding`).
        token_embedding: a `TokenEmbedding` to use instead of a table of
            its own: one token table under two position tables (BART's
            encoder and decoder share `shared`, each with its positions).
            The model that shares it builds it again on reload; it is not
            part of this layer's config.

    Call arguments:
        inputs: (B, T) token ids; or, with `reverse=True`, (B, T, d) hidden
            states mapped to (B, T, V) logits through the tied token table.
        start_index: position of the first token (for cached decoding).
        reverse: map hidden states to logits (the tied output head).

    Returns:
        (B, T, d); or (B, T, V) with `reverse=True`.

    Example:

    ```python
    embedding = TokenAndPositionEmbedding(vocabulary_size=10, sequence_length=16, embedding_dim=8, position="sinusoidal")
    x = embedding(np.array([[1, 2, 3]]))  # (1, 3, 8): tokens plus positions 0..2
    logits = embedding(x, reverse=True)  # (1, 3, 10)
    ```

    References:
        Vaswani et al. 2017, sections 3.4 and 3.5 (embeddings times
        sqrt(d_model), plus sinusoidal positions); Radford et al. 2018,
        Devlin et al. 2019 (learned positions); Lewis et al. 2020 (BART:
        the offset, one token table with a position table per stack).
    """

    def __init__(
        self,
        vocabulary_size,
        sequence_length,
        embedding_dim,
        position="learned",
        mask_zero=False,
        scale_embeddings=False,
        embeddings_initializer="uniform",
        position_initializer="glorot_uniform",
        position_offset=0,
        token_embedding=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        for name, value in (
            ("vocabulary_size", vocabulary_size),
            ("sequence_length", sequence_length),
            ("embedding_dim", embedding_dim),
        ):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"`{name}` must be a positive integer; got {value!r}.")
        if position not in POSITIONS:
            raise ValueError(f"`position` must be one of {POSITIONS}; got {position!r}.")
        if position_offset and position != "learned":
            raise ValueError(f"`position_offset` is an offset into a learned table; got position={position!r}.")
        self.vocabulary_size = vocabulary_size
        self.sequence_length = sequence_length
        self.embedding_dim = embedding_dim
        self.position = position
        self.mask_zero = mask_zero
        self.scale_embeddings = scale_embeddings
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.position_initializer = keras.initializers.get(position_initializer)
        self.position_offset = position_offset
        self.supports_masking = True

        if token_embedding is None:
            token_embedding = TokenEmbedding(
                vocabulary_size,
                embedding_dim,
                embeddings_initializer=fresh(self.embeddings_initializer),
                dtype=self.dtype_policy,
                name="token_embedding",
            )
        elif (token_embedding.input_dim, token_embedding.output_dim) != (vocabulary_size, embedding_dim):
            raise ValueError(
                f"`token_embedding` is ({token_embedding.input_dim}, {token_embedding.output_dim}); expected "
                f"({vocabulary_size}, {embedding_dim})."
            )
        self.token_embedding = token_embedding
        if position == "learned":
            self.position_embedding = PositionEmbedding(
                sequence_length,
                initializer=fresh(self.position_initializer),
                offset=position_offset,
                dtype=self.dtype_policy,
                name="position_embedding",
            )
        else:
            self.position_embedding = SinusoidalPositionEncoding(
                interleaved=position == "sinusoidal", dtype=self.dtype_policy, name="position_encoding"
            )

    def build(self, input_shape):
        if not self.token_embedding.built:  # a shared table is built once
            self.token_embedding.build(input_shape)
        self.position_embedding.build(tuple(input_shape) + (self.embedding_dim,))
        self.built = True

    def call(self, inputs, start_index=0, reverse=False):
        if reverse:
            return self.token_embedding(inputs, reverse=True)  # (B, T, V)
        self._check_length(inputs, start_index)
        x = self.token_embedding(inputs)  # (B, T, d)
        if self.scale_embeddings:
            x = x * ops.cast(math.sqrt(self.embedding_dim), x.dtype)
        return x + self.position_embedding(x, start_index=start_index)

    def _check_length(self, inputs, start_index):
        length = inputs.shape[-1]
        if isinstance(length, int) and isinstance(start_index, int):
            if start_index + length > self.sequence_length:
                raise ValueError(
                    f"Input of length {start_index + length} is longer than the model's "
                    f"maximum sequence length {self.sequence_length}."
                )

    def compute_mask(self, inputs, previous_mask=None):
        if "int" not in str(inputs.dtype):  # the reverse call: hidden states in
            return previous_mask
        return ops.not_equal(inputs, 0) if self.mask_zero else None

    def compute_output_spec(self, inputs, start_index=0, reverse=False):
        if reverse:
            shape = tuple(inputs.shape[:-1]) + (self.vocabulary_size,)
        else:
            self._check_length(inputs, start_index)  # symbolic calls skip `call`
            shape = tuple(inputs.shape) + (self.embedding_dim,)
        return keras.KerasTensor(shape, dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "sequence_length": self.sequence_length,
                "embedding_dim": self.embedding_dim,
                "position": self.position,
                "mask_zero": self.mask_zero,
                "scale_embeddings": self.scale_embeddings,
                "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
                "position_initializer": keras.initializers.serialize(self.position_initializer),
                "position_offset": self.position_offset,
            }
        )
        return config
