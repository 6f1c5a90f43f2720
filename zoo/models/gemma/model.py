"""Decoder-only Transformer of Gemma 3 (the text models: 270M, 1B).

The Llama block (`zoo.models.llama`) with Gemma's changes: the token
embeddings scaled by sqrt(d), the (1 + g) RMSNorm, a second norm on each
sub-layer's output (sandwich norm), GeGLU in place of SwiGLU, a norm on
each query and key head, and local layers: five of every six attend
within a sliding window with their own rotary base, the sixth to the whole
context. The head is tied to the token embedding. Shape letters: B batch,
T length, d width, V vocabulary, h heads, g key/value heads, k head width.
"""

import math
from dataclasses import dataclass

import keras
from keras import ops

from zoo.models.causal_lm import CausalLM
from zoo.models.rotary_decoder import RotaryDecoder, RotaryDecoderConfig

LAYER_TYPES = ("sliding_attention", "full_attention")


def default_layer_types(num_layers, pattern=6):
    """Gemma 3's pattern: every `pattern`-th layer attends to the whole
    context, the others within the sliding window (transformers'
    `sliding_window_pattern`)."""
    return ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(num_layers)]


@dataclass(frozen=True)
class Gemma3Config(RotaryDecoderConfig):
    """Gemma 3's sizes and flags: `Gemma3Backbone`'s constructor arguments,
    and its presets.

    Attributes:
        The fields of `RotaryDecoderConfig` (sizes, context, rotary base,
        norm epsilon, dropout, initialisation), with Gemma 3's defaults
        (`head_dim` is 256 in the checkpoints), then:
        rope_theta: the rotary base of the global layers (1,000,000).
        local_rope_theta: the rotary base of the local layers (10,000;
            transformers' `rope_local_base_freq`).
        sliding_window: how many positions a local layer's query sees,
            itself included (512).
        layer_types: one of "sliding_attention" (local) or
            "full_attention" (global) per layer; None for Gemma 3's five
            local layers then one global.
        query_pre_attention_scalar: the logits are scaled by its inverse
            square root (transformers' `query_pre_attn_scalar`); None for k.

    Example:

    ```python
    config = Gemma3Config(vocabulary_size=50, num_layers=6, num_heads=4, hidden_dim=16, intermediate_dim=32)
    config.layer_types.count("full_attention")  # 1: five local layers, then a global one
    ```

    References:
        The fields of transformers' `Gemma3TextConfig`, under the zoo's
        names (see `zoo.models.gemma.checkpoints`).
    """

    max_sequence_length: int = 32768
    rope_theta: float = 1000000.0
    local_rope_theta: float = 10000.0
    sliding_window: int = 512
    layer_types: list = None
    query_pre_attention_scalar: float = None

    positive = (*RotaryDecoderConfig.positive, "sliding_window")

    def resolve(self):
        return {
            **super().resolve(),
            "layer_types": list(self.layer_types or default_layer_types(self.num_layers)),
        }

    def check(self):
        super().check()
        if len(self.layer_types) != self.num_layers or any(kind not in LAYER_TYPES for kind in self.layer_types):
            raise ValueError(
                f"`layer_types` must list {self.num_layers} of {LAYER_TYPES} (one per layer); got {self.layer_types!r}."
            )


@keras.saving.register_keras_serializable(package="zoo")
class Gemma3Backbone(RotaryDecoder):
    """Token embeddings times sqrt(d), N pre-norm blocks with sandwich norms
    ((1 + g) RMSNorm, rotary grouped-query self-attention with query/key
    norms, GeGLU), local and global by `layer_types`, and a final norm.
    Outputs the (B, T, d) hidden states.

    Args:
        config: a `Gemma3Config`, or its fields as keyword (or positional)
            arguments: `Gemma3Backbone(vocabulary_size=..., num_layers=...)`.

    Inputs: `token_ids` (B, T) int32 and, optionally, `padding_mask`
    (B, T) int32, as `GPTBackbone`.

    Example:

    ```python
    backbone = Gemma3Backbone(vocabulary_size=50, num_layers=2, num_heads=4, hidden_dim=16, intermediate_dim=32,
                              num_key_value_heads=1, head_dim=8, sliding_window=4, max_sequence_length=32)
    hidden = backbone({"token_ids": np.array([[5, 6, 7, 8, 9, 10]])})  # (1, 6, 16)
    backbone.layer_types  # ['sliding_attention', 'sliding_attention']
    ```

    References:
        Gemma Team 2025, "Gemma 3 Technical Report", section 2
        (architecture: 5:1 local/global layers, QK-norm, RoPE bases);
        Gemma Team 2024, "Gemma 2" (sandwich norms, GeGLU, sqrt(d)
        embedding scale); Shazeer 2020 (GLU variants); Beltagy et al.
        2020 (sliding-window attention).
    """

    config_class = Gemma3Config
    activation = "gelu_approximate"
    normalization = "gemma_rms_norm"
    sandwich_norm = True

    def attention_options(self, config, i):
        local = config.layer_types[i] == "sliding_attention"
        key_width = config.head_dim or config.hidden_dim // config.num_heads
        return dict(
            rope_theta=config.local_rope_theta if local else config.rope_theta,
            query_key_norm=True,
            sliding_window=config.sliding_window if local else None,
            attention_scale=1.0 / math.sqrt(config.query_pre_attention_scalar or key_width),
        )

    def embed(self, token_ids, start_index=0, training=None):
        """(B, T) token ids -> (B, T, d) embeddings times sqrt(d), the
        factor rounded to the compute dtype as the checkpoints do.
        Positions enter in each attention layer's rotation."""
        x = self.embedding(token_ids)
        x = x * ops.cast(math.sqrt(self.embedding.output_dim), x.dtype)
        return self.embeddings_dropout(x, training=training)


@keras.saving.register_keras_serializable(package="zoo")
class Gemma3CausalLM(CausalLM):
    """A `Gemma3Backbone` with its tied language-model head: logits
    (B, T, V) for the next token. The same task as `GPTCausalLM` (the
    cached step `zoo.generate` calls, `attention_scores`).

    Args:
        backbone: a `Gemma3Backbone`.

    Example:

    ```python
    backbone = Gemma3Backbone(vocabulary_size=50, num_layers=2, num_heads=4, hidden_dim=16, intermediate_dim=32,
                              num_key_value_heads=1, head_dim=8, sliding_window=4, max_sequence_length=32)
    lm = Gemma3CausalLM(backbone)
    out = zoo.generate(lm, [[5, 6, 7]], max_new_tokens=4)
    len(out.sequences[0])  # 4
    ```

    References:
        Gemma Team 2025 (Gemma 3); Radford et al. 2018, section 3.1 (the
        language-modelling objective).
    """
