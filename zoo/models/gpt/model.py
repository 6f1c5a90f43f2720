"""Decoder-only Transformer: GPT-1 (post-LN) and GPT-2 (pre-LN).

Radford et al. 2018, 2019. Shape letters: B batch, T length, d width,
V vocabulary.
"""

import math

import keras

from zoo.layers import DecoderBlock, LayerNormalization, TokenAndPositionEmbedding
from zoo.models.base import ZooModel, gpt_initializer
from zoo.models.causal_lm import CausalLM
from zoo.models.decoder_stack import DecoderStack
from zoo.models.gpt.config import GPTConfig


@keras.saving.register_keras_serializable(package="zoo")
class GPTBackbone(DecoderStack, ZooModel):
    """Token + learned position embeddings, N causal blocks, and (pre-LN)
    a final LayerNorm. Outputs the (B, T, d) hidden states.

    Args:
        config: a `GPTConfig`, or its fields as keyword (or positional)
            arguments: `GPTBackbone(vocabulary_size=..., num_layers=...)`.

    Inputs: `token_ids` (B, T) int32 and, optionally, `padding_mask`
    (B, T) int32 (1 for tokens, 0 for padding). Without a padding mask
    (language-model batches of full windows need none) the only mask is the
    causal one, and attention runs the backend's causal kernel.

    Example:

    ```python
    backbone = GPTBackbone(vocabulary_size=50, num_layers=2, num_heads=2, hidden_dim=16, max_sequence_length=32)
    token_ids = np.array([[5, 6, 7, 8]])
    hidden = backbone({"token_ids": token_ids})  # (1, 4, 16)
    scores = backbone.attention_scores({"token_ids": token_ids})
    scores["self"].shape  # (2, 1, 2, 4, 4): (N, B, h, T, T)
    ```

    References:
        Radford et al. 2018 (GPT-1), section 3.1; Radford et al. 2019
        (GPT-2), section 2.3 (pre-LN, final LayerNorm, scaled init).
    """

    is_encoder_decoder = False
    optional_inputs = ("padding_mask",)
    config_class = GPTConfig

    def __init__(self, *args, dtype=None, **kwargs):
        config, kwargs = GPTConfig.take(args, kwargs)
        # === Layers ===
        self.embedding = TokenAndPositionEmbedding(
            config.vocabulary_size,
            config.max_sequence_length,
            config.hidden_dim,
            position="learned",
            embeddings_initializer=gpt_initializer(config.initializer_range),
            position_initializer=gpt_initializer(config.initializer_range),
            dtype=dtype,
            name="embedding",
        )
        self.embeddings_dropout = keras.layers.Dropout(config.dropout, dtype=dtype, name="embeddings_dropout")
        residual_initializer = gpt_initializer(config.initializer_range / math.sqrt(2 * config.num_layers))
        self.blocks = [
            DecoderBlock(
                config.num_heads,
                config.intermediate_dim,
                dropout=config.dropout,
                activation=config.activation,
                norm_first=config.norm_first,
                norm_epsilon=config.layer_norm_epsilon,
                kernel_initializer=gpt_initializer(config.initializer_range),
                output_kernel_initializer=residual_initializer,
                use_bias=config.use_bias,
                dtype=dtype,
                name=f"block_{i}",
            )
            for i in range(config.num_layers)
        ]
        self.final_norm = (
            LayerNormalization(
                epsilon=config.layer_norm_epsilon, center=config.use_bias, dtype=dtype, name="final_norm"
            )
            if config.norm_first
            else None
        )

        # === Functional model ===
        inputs, x = self._functional_graph()
        super().__init__(inputs=inputs, outputs=x, dtype=dtype, **kwargs)

        # === Config ===
        self._set_config(config, num_key_value_heads=config.num_heads, head_dim=config.hidden_dim // config.num_heads)

    def embed(self, token_ids, start_index=0, training=None):
        """(B, T) token ids at positions start_index.. -> (B, T, d)."""
        x = self.embedding(token_ids, start_index=start_index)
        return self.embeddings_dropout(x, training=training)


@keras.saving.register_keras_serializable(package="zoo")
class GPTCausalLM(CausalLM):
    """A GPT backbone with its language-model head tied to the token
    embedding. Outputs logits (B, T, V) for the next token, in the head's
    compute dtype (bfloat16 under mixed precision, as keras-hub's GPT2CausalLM;
    the losses sum them in float32).

    It owns its cached decoding step, what `zoo.generate` calls:
    `empty_cache(batch_size, length)` and `call_with_cache(token_ids,
    cache, cache_index) -> (logits, cache)`, through the backbone's own
    blocks.

    Args:
        backbone: a `GPTBackbone`.

    Inputs: as the backbone's (`padding_mask` optional).

    Example:

    ```python
    backbone = GPTBackbone(vocabulary_size=50, num_layers=2, num_heads=2, hidden_dim=16, max_sequence_length=32)
    lm = GPTCausalLM(backbone)
    logits = lm({"token_ids": np.array([[5, 6, 7]])})  # (1, 3, 50)
    out = zoo.generate(lm, [[5, 6, 7]], max_new_tokens=4)
    len(out.sequences[0])  # 4
    ```

    References:
        Radford et al. 2018 (GPT-1), section 3.1 (the language-modelling
        objective, the output head tied to the token embedding).
    """
