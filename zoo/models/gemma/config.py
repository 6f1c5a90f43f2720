"""The Gemma 3 family's config, the one list of its sizes and flags, and its
presets, instances of it."""

import math
from dataclasses import dataclass

from zoo.models.config import Preset
from zoo.models.rotary_decoder import RotaryDecoderConfig

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
        names (see `zoo.models.gemma.weight_map`).
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

    def attention_options(self, i):
        """A local layer attends within the window with the local rotary
        base; every layer norms its query and key heads."""
        local = self.layer_types[i] == "sliding_attention"
        key_width = self.head_dim or self.hidden_dim // self.num_heads
        return dict(
            rope_theta=self.local_rope_theta if local else self.rope_theta,
            query_key_norm=True,
            sliding_window=self.sliding_window if local else None,
            attention_scale=1.0 / math.sqrt(self.query_pre_attention_scalar or key_width),
        )


# The published 270M's config.json, and a small size for tests.
PRESETS = {
    "gemma3-270m": Preset(
        "Gemma 3 270M: 18 layers, d=640, 4 heads of 256, 1 key/value head, 5 local (window 512) "
        "to 1 global, vocabulary 262,144, tied.",
        Gemma3Config(vocabulary_size=262144, num_layers=18, num_heads=4, hidden_dim=640, intermediate_dim=2048,
                     num_key_value_heads=1, head_dim=256, max_sequence_length=32768, rope_theta=1000000.0,
                     local_rope_theta=10000.0, sliding_window=512, query_pre_attention_scalar=256),
    ),
    "gemma3-nano": Preset(
        "Tests: 6 layers (5 local with window 8, 1 global), d=32, 4 heads of 16, 1 key/value head.",
        Gemma3Config(vocabulary_size=100, num_layers=6, num_heads=4, hidden_dim=32, intermediate_dim=64,
                     num_key_value_heads=1, head_dim=16, max_sequence_length=64, sliding_window=8),
    ),
}
