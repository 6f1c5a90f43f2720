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

from zoo.models.causal_lm import CausalLM
from zoo.models.rotary_decoder import RotaryDecoder, RotaryDecoderConfig


@dataclass(frozen=True)
class LlamaConfig(RotaryDecoderConfig):
    """The Llama family's sizes and variant flags: `LlamaBackbone`'s
    constructor arguments, and its presets.

    Attributes:
        vocabulary_size, num_layers, num_heads, hidden_dim,
        intermediate_dim, num_key_value_heads, head_dim,
        max_sequence_length, rope_theta, rms_norm_epsilon, dropout,
        initializer_range: see `RotaryDecoderConfig` (Qwen3 sets
            `head_dim`; the RMSNorms' epsilon is 1e-5 unless given).
        rope_scaling: None or a Hugging Face "llama3" scaling dict.
        tie_word_embeddings: the logits through the token embedding (True)
            or through their own (d, V) head (False, as TinyLlama).
        attention_bias: biases on the Q, K and V projections (Qwen2).
        query_key_norm: an RMSNorm on each query and key head (Qwen3).

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

    rms_norm_epsilon: float = 1e-5
    rope_scaling: dict = None
    tie_word_embeddings: bool = True
    attention_bias: bool = False
    query_key_norm: bool = False


@keras.saving.register_keras_serializable(package="zoo")
class LlamaBackbone(RotaryDecoder):
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

    config_class = LlamaConfig

    def attention_options(self, config, i):
        return dict(
            rope_theta=config.rope_theta,
            rope_scaling=config.rope_scaling,
            query_key_norm=config.query_key_norm,
            use_bias=config.attention_bias,
        )

    def untied_head(self, config, initializer, dtype):
        if config.tie_word_embeddings:
            return None
        return keras.layers.Dense(
            config.vocabulary_size, use_bias=False, kernel_initializer=initializer, dtype=dtype, name="lm_head"
        )


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
