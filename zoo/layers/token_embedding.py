"""A token embedding that can also be used in reverse as a tied output head.

Shape letters: B batch, T length, d width, V vocabulary.
"""

import keras
from keras import ops

from zoo.kernels import float_head, int4_matmul, int8_in_groups, integer_matmul, quantized_matmul
from zoo.layers.dequantized import after

# On a GPU the tied head's product is computed this many logits wide at a time.
LOGITS_MULTIPLE = 128


def pads_logits():
    """Whether the tied head pads its product to `LOGITS_MULTIPLE` columns:
    on JAX with a GPU, where XLA gives a product 50,257 logits wide (GPT-2)
    Triton kernels slower than the cuBLAS ones it gives 50,304 (GPT-2 small
    training on one H100: 47.8 against 40.5 ms per step; docs/gpu.md)."""
    if keras.backend.backend() != "jax":
        return False
    import jax

    return jax.default_backend() == "gpu"


@keras.saving.register_keras_serializable(package="zoo")
class TokenEmbedding(keras.layers.Embedding):
    """`keras.layers.Embedding` whose table, transposed, also maps to logits.

    Called as usual, (B, T) ids -> (B, T, d). Called with `reverse=True`,
    (B, T, d) hidden states -> (B, T, V) logits through the same table: the
    weight tying of Press & Wolf (2017) used by the Transformer, GPT and
    BERT. Token ids outside [0, V) are an error in eager calls.

    On a GPU (JAX) the reverse product of more than one position per row
    runs against the table padded with zero rows to a multiple of 128 and
    keeps the first V logits, as nanoGPT pads GPT-2's vocabulary for speed;
    the logits, the table and the checkpoints keep V. A decoding step's one
    position multiplies against the table itself.

    `quantize("int8")` and `quantize("int4")` (Keras' Embedding
    quantization, what `model.quantize` calls) quantize the one table for
    both directions. The reverse call then does what keras-hub's
    `ReversibleEmbedding` does with tied weights: the hidden states are
    quantized per row (abs-max, the activation quantizer of the config),
    multiplied by the integer table, and the product is divided by both
    scales; an int4 table quantized in groups (`block_size`) multiplies the
    hidden states rounded to int8 in the same groups
    (`zoo.kernels.int8_in_groups`, as llama.cpp's q4_0 does). Keras has no
    float8 Embedding, so under "float8" the table and
    the tied head stay in float.

    Args:
        input_dim: V. output_dim: d. Other arguments as
            `keras.layers.Embedding`.

    Call arguments:
        inputs: (B, T) ids, or with `reverse=True` (B, T, d) hidden states.
        reverse: map hidden states to (B, T, V) logits.

    Example:

    ```python
    embedding = TokenEmbedding(input_dim=10, output_dim=4)
    x = embedding(np.array([[1, 2, 3]]))  # (1, 3, 4)
    logits = embedding(x, reverse=True)  # (1, 3, 10)
    ```

    References:
        Press and Wolf 2017 (tying the input and output embeddings);
        Vaswani et al. 2017, section 3.4.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.supports_masking = True  # passes no mask on; see TokenAndPositionEmbedding

    def call(self, inputs, reverse=False):
        if reverse:
            table = ops.cast(ops.convert_to_tensor(self.embeddings), self.compute_dtype)  # (V, d)
            # A decoding step (one position per row) multiplies against the table as it is: its product
            # reads the table once anyway, and the padded copy would write it again at every token.
            one_position = inputs.shape[-2] == 1
            padding = -self.input_dim % LOGITS_MULTIPLE if pads_logits() and not one_position else 0
            if padding:
                table = ops.pad(table, [[0, padding], [0, 0]])  # (V', d), zero rows
            hidden = ops.cast(inputs, self.compute_dtype)
            logits = None if padding else float_head(hidden, table)  # a few rows, on a CPU: the kernel
            if logits is None:
                logits = ops.matmul(hidden, ops.transpose(table))  # (B, T, V')
            return logits[..., : self.input_dim] if padding else logits
        _check_ids(inputs, self.input_dim)
        return super().call(inputs)

    def quantize(self, mode=None, type_check=True, config=None):
        # Keras' Embedding refuses subclasses (`type_check`): the reverse call below is this subclass's part.
        super().quantize(mode, type_check=False, config=config)

    def _int8_build(self, embeddings_shape, config=None):
        super()._int8_build(embeddings_shape, config)
        self._build_inputs_quantizer(config)

    def _int4_build(self, embeddings_shape, config=None):
        super()._int4_build(embeddings_shape, config)
        self._build_inputs_quantizer(config)

    def _build_inputs_quantizer(self, config):
        default = keras.quantizers.AbsMaxQuantizer(axis=-1)
        self.inputs_quantizer = keras.quantizers.QuantizationConfig.activation_quantizer_or_default(config, default)

    def _int8_call(self, inputs, reverse=False):
        if not reverse:
            _check_ids(inputs, self.input_dim)
            return super()._int8_call(inputs)
        return self._integer_reverse(inputs, self._embeddings)

    def _int4_call(self, inputs, reverse=False):
        if not reverse:
            _check_ids(inputs, self.input_dim)
            return super()._int4_call(inputs)
        if getattr(self, "_int4_block_size", None) in (None, -1):  # one scale per token: exact integer product
            table = keras.quantizers.unpack_int4(self._embeddings, self.output_dim, axis=-1)  # (V, d) int8
            return self._integer_reverse(inputs, table)
        hidden = ops.cast(inputs, self.compute_dtype)
        if self.lora_enabled:
            return self._int4_dequantized_reverse(hidden)

        @ops.custom_gradient
        def product(hidden):
            def gradient(*args, upstream=None):
                upstream = args[0] if upstream is None else upstream  # TensorFlow passes it first, JAX by name
                return ops.matmul(upstream, self._int4_table())

            logits = int4_matmul(hidden, self._embeddings, self.embeddings_scale, self.embeddings_zero,
                                 self._int4_block_size, self.input_dim, transposed=True)  # the 4-bit table as it is
            if logits is None:
                logits = self._int4_dequantized_reverse(hidden)
            return logits, gradient

        return product(hidden)

    def _int4_dequantized_reverse(self, hidden):
        """(B, T, d) hidden states rounded to int8 in the table's groups times
        the dequantized (V, d) table, transposed: the int4 tied head on XLA."""
        return ops.matmul(int8_in_groups(hidden, self._int4_block_size), ops.transpose(self._int4_table()))

    def _int4_table(self):
        """The (V, d) table of int4 in groups, dequantized by looking up every
        id: groups with zero points do not factor out of the product."""
        return super()._int4_call(ops.arange(self.input_dim, dtype="int32"))

    def _integer_reverse(self, inputs, table):
        """(B, T, d) hidden states times the (V, d) integer table, transposed, de-scaled.
        The rounding of the hidden states has no gradient, so the gradient
        passes it straight through the de-quantized table (as Keras' int8
        Dense does): what trains below a quantized tied head (LoRA adapters,
        QLoRA) gets one, through the table dequantized once the upstream
        gradient exists (zoo.layers.dequantized)."""
        scale = ops.cast(self.embeddings_scale, self.compute_dtype)  # (V,)

        @ops.custom_gradient
        def product(hidden):
            def gradient(*args, upstream=None):
                upstream = args[0] if upstream is None else upstream  # TensorFlow passes it first, JAX by name
                dequantized = ops.divide(ops.cast(after(table, upstream), self.compute_dtype),
                                         after(scale, upstream)[:, None])  # (V, d)
                return ops.matmul(ops.cast(upstream, self.compute_dtype), dequantized)  # (B, T, d)

            if self.inputs_quantizer:
                # The quantizer, the integer product and the de-scaling in one call where the kernel takes it.
                logits = quantized_matmul(hidden, table, scale, self.inputs_quantizer, transposed=True)
                if logits is not None:
                    return ops.cast(logits, self.compute_dtype), gradient
                hidden, hidden_scale = self.inputs_quantizer(hidden)  # (B, T, d) int8, (B, T, 1)
                logits = integer_matmul(hidden, table, transposed=True)  # (B, T, V) int32
            else:
                hidden_scale = ops.ones((1,), dtype=self.compute_dtype)
                logits = ops.matmul(ops.cast(hidden, self.compute_dtype), ops.transpose(ops.cast(table, self.compute_dtype)))
            logits = ops.cast(logits, self.compute_dtype)  # (B, T, V)
            return ops.divide(logits, ops.multiply(hidden_scale, scale)), gradient

        return product(inputs)

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shape, reverse=False):
        if reverse:
            return tuple(input_shape[:-1]) + (self.input_dim,)
        return tuple(input_shape) + (self.output_dim,)

    def compute_output_spec(self, inputs, reverse=False):
        shape = self.compute_output_shape(inputs.shape, reverse=reverse)
        return keras.KerasTensor(shape, dtype=self.compute_dtype)


def eager_values(x):
    """x as a NumPy array, or None if it is symbolic or traced (the data
    pipeline checks those instead)."""
    try:
        import numpy as np

        return np.asarray(x)
    except Exception:
        return None


def first_out_of_range(values, high):
    """The first value of an array outside [0, high), or None."""
    bad = values[(values < 0) | (values >= high)]
    return int(bad.flat[0]) if bad.size else None


def _check_ids(ids, vocabulary_size):
    """Cheap eager check that token ids are inside the vocabulary."""
    values = eager_values(ids)
    if values is None or not values.size:
        return
    bad = first_out_of_range(values, vocabulary_size)
    if bad is not None:
        raise ValueError(
            f"Token id {bad} is outside the vocabulary: ids must be in "
            f"[0, {vocabulary_size})."
        )
