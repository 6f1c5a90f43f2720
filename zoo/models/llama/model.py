"""Decoder-only Transformer with today's variants: Llama, Mistral, Qwen2,
Qwen3, SmolLM2, TinyLlama.

The GPT decoder (`zoo.models.gpt`) with four named changes: RMSNorm in
place of LayerNorm, rotary positions in place of learned ones,
grouped-query attention, and the SwiGLU feed-forward network; no biases
(but Qwen2's Q, K and V), an optional untied head and Qwen3's per-head
query/key norm. Shape letters: B batch, T length, d width, V vocabulary,
h heads, g key/value heads, k head width.
"""

import keras

from zoo.layers.initializers import fresh
from zoo.models.causal_lm import CausalLM
from zoo.models.llama.config import LlamaConfig
from zoo.models.rotary_decoder import RotaryDecoder


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
    keys, values = cache[0]  # the first block's
    keys.shape  # (1, 2, 8, 4): (B, g, S, k), g = 2 key/value heads
    ```

    References:
        Touvron et al. 2023 (LLaMA), section 2.2: pre-normalisation with
        RMSNorm (Zhang and Sennrich 2019), SwiGLU (Shazeer 2020), rotary
        embeddings (Su et al. 2021); Ainslie et al. 2023 (grouped-query
        attention); Meta's Llama 3 (rope scaling); Qwen2 and Qwen3
        technical reports (Q, K, V biases; query/key norm).
    """

    config_class = LlamaConfig

    def untied_head(self, config, initializer, dtype):
        if config.tie_word_embeddings:
            return None
        return keras.layers.Dense(
            config.vocabulary_size, use_bias=False, kernel_initializer=fresh(initializer), dtype=dtype, name="lm_head"
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
