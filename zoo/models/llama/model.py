"""Decoder-only Transformer with today's variants: Llama, Mistral, Qwen2,
Qwen3, SmolLM2, TinyLlama.

The GPT decoder (`zoo.models.gpt`) with four named changes: RMSNorm in
place of LayerNorm, rotary positions in place of learned ones,
grouped-query attention, and the SwiGLU feed-forward network; no biases
(but Qwen2's Q, K and V), an optional untied head and Qwen3's per-head
query/key norm. Shape letters: B batch, T length, d width, V vocabulary,
h heads, g key/value heads, k head width.
"""

from dataclasses import dataclass

import keras

from zoo.layers import DecoderBlock, RMSNorm, TokenEmbedding
from zoo.models.base import ZooModel, gpt_initializer
from zoo.models.causal_lm import CausalLM
from zoo.models.config import RotaryDecoderConfig
from zoo.models.decoder_stack import DecoderStack


@dataclass(frozen=True)
class LlamaConfig(RotaryDecoderConfig):
    """The Llama family's sizes and variant flags: `LlamaBackbone`'s
    constructor arguments, and its presets.

    Attributes:
        vocabulary_size, num_layers, num_heads, hidden_dim,
        intermediate_dim, num_key_value_heads, head_dim,
        max_sequence_length, rope_theta: see `RotaryDecoderConfig`
            (Qwen3 sets `head_dim`).
        rope_scaling: None or a Hugging Face "llama3" scaling dict.
        rms_norm_epsilon: the RMSNorms' epsilon (`rms_norm_eps`).
        tie_word_embeddings: the logits through the token embedding (True)
            or through their own (d, V) head (False, as TinyLlama).
        attention_bias: biases on the Q, K and V projections (Qwen2).
        query_key_norm: an RMSNorm on each query and key head (Qwen3).
        dropout: residual and attention dropout (0 in the checkpoints).
        initializer_range: std of the normal initialisation of every
            kernel and embedding (0.02).

    Example:

    ```python
    config = LlamaConfig(vocabulary_size=50, num_layers=2, num_heads=4, hidden_dim=16, intermediate_dim=32,
                         num_key_value_heads=2, query_key_norm=True)
    LlamaBackbone(config=config).config == config  # True
    ```

    References:
        The fields of transformers' `LlamaConfig`, `Qwen2Config` and
        `Qwen3Config`, under the zoo's names (see `zoo.models.llama.checkpoints`).
    """

    rope_scaling: dict = None
    rms_norm_epsilon: float = 1e-5
    tie_word_embeddings: bool = True
    attention_bias: bool = False
    query_key_norm: bool = False
    dropout: float = 0.0
    initializer_range: float = 0.02


@keras.saving.register_keras_serializable(package="zoo")
class LlamaBackbone(DecoderStack, ZooModel):
    """Token embeddings, N pre-norm blocks (RMSNorm, rotary grouped-query
    self-attention, SwiGLU) and a final RMSNorm. Outputs the (B, T, d)
    hidden states.

    Args:
        config: a `LlamaConfig`, or its fields as keyword (or positional)
            arguments: `LlamaBackbone(vocabulary_size=..., num_layers=...)`.

    Inputs: `token_ids` (B, T) int32 and, optionally, `padding_mask`
    (B, T) int32, as `GPTBackbone`.

    Example:

    ```python
    backbone = LlamaBackbone(vocabulary_size=50, num_layers=2, num_heads=4, hidden_dim=16,
                             intermediate_dim=32, num_key_value_heads=2, max_sequence_length=32)
    hidden = backbone({"token_ids": np.array([[5, 6, 7, 8]])})  # (1, 4, 16)
    cache = backbone.empty_cache(1, 8)
    cache[0].shape  # (1, 2, 2, 8, 4): (B, 2, g, S, k), g = 2 key/value heads
    ```

    References:
        Touvron et al. 2023 (LLaMA), section 2.2: pre-normalisation with
        RMSNorm (Zhang and Sennrich 2019), SwiGLU (Shazeer 2020), rotary
        embeddings (Su et al. 2021); Ainslie et al. 2023 (grouped-query
        attention); Meta's Llama 3 (rope scaling); Qwen2 and Qwen3
        technical reports (Q, K, V biases; query/key norm).
    """

    is_encoder_decoder = False
    optional_inputs = ("padding_mask",)
    config_class = LlamaConfig

    def __init__(self, *args, dtype=None, **kwargs):
        config, kwargs = LlamaConfig.take(args, kwargs)
        initializer = gpt_initializer(config.initializer_range)
        # === Layers ===
        self.embedding = TokenEmbedding(
            config.vocabulary_size, config.hidden_dim, embeddings_initializer=initializer, dtype=dtype,
            name="token_embedding",
        )
        self.embeddings_dropout = keras.layers.Dropout(config.dropout, dtype=dtype, name="embeddings_dropout")
        self.blocks = [
            DecoderBlock(
                config.num_heads,
                config.intermediate_dim,
                dropout=config.dropout,
                activation="silu",
                norm_first=True,
                norm_epsilon=config.rms_norm_epsilon,
                kernel_initializer=initializer,
                use_bias=False,
                normalization="rms_norm",
                gated_feed_forward=True,
                self_attention_options=dict(
                    num_key_value_heads=config.num_key_value_heads,
                    head_dim=config.head_dim,
                    rope_theta=config.rope_theta,
                    rope_scaling=config.rope_scaling,
                    query_key_norm=config.query_key_norm,
                    use_bias=config.attention_bias,
                ),
                dtype=dtype,
                name=f"block_{i}",
            )
            for i in range(config.num_layers)
        ]
        self.final_norm = RMSNorm(config.rms_norm_epsilon, dtype=dtype, name="final_norm")
        self.lm_head = None
        if not config.tie_word_embeddings:
            self.lm_head = keras.layers.Dense(
                config.vocabulary_size, use_bias=False, kernel_initializer=initializer, dtype=dtype, name="lm_head"
            )

        # === Functional model ===
        inputs, x = self._functional_graph()
        if self.lm_head is not None:
            self.lm_head.build(x.shape)
        super().__init__(inputs=inputs, outputs=x, dtype=dtype, **kwargs)

        # === Config ===
        self._set_config(config, head_dim=config.head_dim or config.hidden_dim // config.num_heads)

    def embed(self, token_ids, start_index=0, training=None):
        """(B, T) token ids -> (B, T, d). Positions enter in each
        attention layer's rotation, so `start_index` is not read here."""
        return self.embeddings_dropout(self.embedding(token_ids), training=training)

    def logits(self, hidden):
        """(B, T, d) final hidden states -> (B, T, V) logits: the tied token
        embedding, or the untied head."""
        if self.lm_head is None:
            return self.embedding(hidden, reverse=True)
        return self.lm_head(hidden)


@keras.saving.register_keras_serializable(package="zoo")
class LlamaCausalLM(CausalLM):
    """A `LlamaBackbone` with its language-model head (tied or untied, as
    the backbone's `tie_word_embeddings`): logits (B, T, V) for the next
    token. The same task as `GPTCausalLM` (the cached step `zoo.generate`
    calls, `attention_scores`), over the Llama backbone.

    Args:
        backbone: a `LlamaBackbone`.

    Example:

    ```python
    backbone = LlamaBackbone(vocabulary_size=50, num_layers=2, num_heads=4, hidden_dim=16,
                             intermediate_dim=32, num_key_value_heads=2, max_sequence_length=32)
    lm = LlamaCausalLM(backbone)
    out = zoo.generate(lm, [[5, 6, 7]], max_new_tokens=4)
    len(out.sequences[0])  # 4
    ```

    References:
        Touvron et al. 2023 (LLaMA); Radford et al. 2018, section 3.1 (the
        language-modelling objective).
    """
