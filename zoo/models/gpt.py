"""Decoder-only Transformer: GPT-1 (post-LN) and GPT-2 (pre-LN).

Radford et al. 2018, 2019. Shape letters: B batch, T length, d width,
V vocabulary.
"""

import math

import keras

from zoo.layers import DecoderBlock, TokenAndPositionEmbedding
from zoo.models.base import ZooModel, check_positive, gpt_initializer


@keras.saving.register_keras_serializable(package="zoo")
class GPTBackbone(ZooModel):
    """Token + learned position embeddings, N causal blocks, and (pre-LN)
    a final LayerNorm. Outputs the (B, T, d) hidden states.

    Args:
        vocabulary_size: V.
        num_layers: N.
        num_heads: h.
        hidden_dim: d.
        intermediate_dim: d_ff (4 * d in GPT).
        max_sequence_length: the context length (learned positions).
        dropout: residual, attention and embedding dropout.
        norm_first: True for GPT-2 (pre-LN + final LayerNorm), False for
            GPT-1 (post-LN, no final LayerNorm).
        activation: "gelu_approximate" (GPT-2) by default.
        layer_norm_epsilon: 1e-5 as GPT-2.
        initializer_range: std of the normal initialisation (0.02); the
            projections into the residual stream use
            initializer_range / sqrt(2 * num_layers), GPT-2's scaled init.
        use_bias: whether the projections and LayerNorms have biases; True
            for GPT-2, False for nanoGPT's `bias=False`.

    Inputs: `token_ids` (B, T) int32, `padding_mask` (B, T) int32 (1 for
    tokens, 0 for padding).
    """

    def __init__(
        self,
        vocabulary_size,
        num_layers,
        num_heads,
        hidden_dim,
        intermediate_dim=None,
        max_sequence_length=1024,
        dropout=0.0,
        norm_first=True,
        activation="gelu_approximate",
        layer_norm_epsilon=1e-5,
        initializer_range=0.02,
        use_bias=True,
        dtype=None,
        **kwargs,
    ):
        check_positive(
            vocabulary_size=vocabulary_size,
            num_layers=num_layers,
            num_heads=num_heads,
            hidden_dim=hidden_dim,
            max_sequence_length=max_sequence_length,
        )
        intermediate_dim = intermediate_dim or 4 * hidden_dim
        # === Layers ===
        self.embedding = TokenAndPositionEmbedding(
            vocabulary_size,
            max_sequence_length,
            hidden_dim,
            position="learned",
            embeddings_initializer=gpt_initializer(initializer_range),
            position_initializer=gpt_initializer(initializer_range),
            dtype=dtype,
            name="embedding",
        )
        self.embeddings_dropout = keras.layers.Dropout(dropout, dtype=dtype, name="embeddings_dropout")
        residual_initializer = gpt_initializer(initializer_range / math.sqrt(2 * num_layers))
        self.blocks = [
            DecoderBlock(
                num_heads,
                intermediate_dim,
                dropout=dropout,
                activation=activation,
                norm_first=norm_first,
                layer_norm_epsilon=layer_norm_epsilon,
                kernel_initializer=gpt_initializer(initializer_range),
                output_kernel_initializer=residual_initializer,
                use_bias=use_bias,
                dtype=dtype,
                name=f"block_{i}",
            )
            for i in range(num_layers)
        ]
        self.final_norm = (
            keras.layers.LayerNormalization(
                epsilon=layer_norm_epsilon, center=use_bias, dtype=dtype, name="final_norm"
            )
            if norm_first
            else None
        )

        # === Functional model ===
        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        padding_mask = keras.Input(shape=(None,), dtype="int32", name="padding_mask")
        x = self.embeddings_dropout(self.embedding(token_ids))
        for block in self.blocks:
            x = block(x, padding_mask=padding_mask)
        if self.final_norm is not None:
            x = self.final_norm(x)
        super().__init__(
            inputs={"token_ids": token_ids, "padding_mask": padding_mask},
            outputs=x,
            dtype=dtype,
            **kwargs,
        )

        # === Config ===
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.max_sequence_length = max_sequence_length
        self.dropout = dropout
        self.norm_first = norm_first
        self._record_config(
            vocabulary_size=vocabulary_size,
            num_layers=num_layers,
            num_heads=num_heads,
            hidden_dim=hidden_dim,
            intermediate_dim=intermediate_dim,
            max_sequence_length=max_sequence_length,
            dropout=dropout,
            norm_first=norm_first,
            activation=activation,
            layer_norm_epsilon=layer_norm_epsilon,
            initializer_range=initializer_range,
            use_bias=use_bias,
        )

    def hidden_states(self, x, padding_mask=None, cache=None, cache_index=None, training=False):
        """Run the blocks and final norm on embedded inputs x (B, T, d).

        The same layers as the functional graph; with `cache`
        (B, N, 2, h, S_max, k) every block reads and writes its keys and
        values at `cache_index`, and the updated cache is returned as
        `(hidden, cache)`. Used by `zoo.generate`. The cache may also be a
        tuple of N per-layer (B, 2, h, S_max, k) caches, returned as a
        tuple: a compiled decoding loop then updates each in place instead
        of re-stacking the whole cache every step.
        """
        if cache is None:
            for block in self.blocks:
                x = block(x, padding_mask=padding_mask, training=training)
            return self.final_norm(x) if self.final_norm is not None else x
        per_layer = isinstance(cache, (list, tuple))
        updated = []
        for i, block in enumerate(self.blocks):
            x, layer_cache, _ = block(
                x,
                self_attention_cache=cache[i] if per_layer else cache[:, i],
                cache_index=cache_index,
                training=training,
            )
            updated.append(layer_cache)
        x = self.final_norm(x) if self.final_norm is not None else x
        return x, tuple(updated) if per_layer else keras.ops.stack(updated, axis=1)


@keras.saving.register_keras_serializable(package="zoo")
class GPTCausalLM(ZooModel):
    """A GPT backbone with its language-model head tied to the token
    embedding. Outputs float32 logits (B, T, V) for the next token.

    Args:
        backbone: a `GPTBackbone`.
    """

    def __init__(self, backbone, **kwargs):
        # === Layers ===
        self.backbone = backbone
        self.logits_cast = keras.layers.Activation("linear", dtype="float32", name="logits")
        # === Functional model ===
        inputs = {
            "token_ids": keras.Input(shape=(None,), dtype="int32", name="token_ids"),
            "padding_mask": keras.Input(shape=(None,), dtype="int32", name="padding_mask"),
        }
        hidden = backbone(inputs)
        logits = self.logits_cast(backbone.embedding(hidden, reverse=True))
        super().__init__(inputs=inputs, outputs=logits, **kwargs)
        # === Config ===
        self._record_config(backbone=backbone)

    def logits(self, hidden):
        """(B, T, d) final hidden states -> (B, T, V) float32 logits."""
        return self.logits_cast(self.backbone.embedding(hidden, reverse=True))
