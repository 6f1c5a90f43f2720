"""The Llama family's config, the one list of its sizes and flags, and its
presets, instances of it."""

from dataclasses import dataclass

from zoo.models.config import Preset
from zoo.models.rotary_decoder import RotaryDecoderConfig


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
    config.attention_options(0)["query_key_norm"]  # True: every layer's self-attention
    ```

    References:
        The fields of transformers' `LlamaConfig`, `Qwen2Config` and
        `Qwen3Config`, under the zoo's names (see `zoo.models.llama.weight_map`).
    """

    rms_norm_epsilon: float = 1e-5
    rope_scaling: dict = None
    tie_word_embeddings: bool = True
    attention_bias: bool = False
    query_key_norm: bool = False

    def attention_options(self, i):
        return dict(
            rope_theta=self.rope_theta,
            rope_scaling=self.rope_scaling,
            query_key_norm=self.query_key_norm,
            use_bias=self.attention_bias,
        )


# The shapes of the published checkpoints' config.json (weights come from `zoo.from_pretrained`),
# and small sizes for characters and tests.
PRESETS = {
    "smollm2-135m": Preset(
        "SmolLM2 135M: 30 layers, d=576, 9 heads, 3 key/value heads, tied, context 8192.",
        LlamaConfig(vocabulary_size=49152, num_layers=30, num_heads=9, hidden_dim=576, intermediate_dim=1536,
                    num_key_value_heads=3, max_sequence_length=8192, rope_theta=100000.0,
                    rms_norm_epsilon=1e-5, tie_word_embeddings=True),
    ),
    "qwen2.5-0.5b": Preset(
        "Qwen2.5 0.5B: 24 layers, d=896, 14 heads, 2 key/value heads, Q/K/V biases, tied.",
        LlamaConfig(vocabulary_size=151936, num_layers=24, num_heads=14, hidden_dim=896, intermediate_dim=4864,
                    num_key_value_heads=2, max_sequence_length=32768, rope_theta=1000000.0,
                    rms_norm_epsilon=1e-6, tie_word_embeddings=True, attention_bias=True),
    ),
    "qwen3-0.6b": Preset(
        "Qwen3 0.6B: 28 layers, d=1024, 16 heads of 128, 8 key/value heads, query/key norm, tied.",
        LlamaConfig(vocabulary_size=151936, num_layers=28, num_heads=16, hidden_dim=1024, intermediate_dim=3072,
                    num_key_value_heads=8, head_dim=128, max_sequence_length=40960, rope_theta=1000000.0,
                    rms_norm_epsilon=1e-6, tie_word_embeddings=True, query_key_norm=True),
    ),
    "llama-3.2-1b": Preset(
        "Llama 3.2 1B: 16 layers, d=2048, 32 heads, 8 key/value heads, Llama 3 rope scaling, tied.",
        LlamaConfig(vocabulary_size=128256, num_layers=16, num_heads=32, hidden_dim=2048, intermediate_dim=8192,
                    num_key_value_heads=8, max_sequence_length=131072, rope_theta=500000.0,
                    rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0,
                                      high_freq_factor=4.0, original_max_position_embeddings=8192),
                    rms_norm_epsilon=1e-5, tie_word_embeddings=True),
    ),
    "tinyllama-1.1b": Preset(
        "TinyLlama 1.1B: 22 layers, d=2048, 32 heads, 4 key/value heads, untied head, context 2048.",
        LlamaConfig(vocabulary_size=32000, num_layers=22, num_heads=32, hidden_dim=2048, intermediate_dim=5632,
                    num_key_value_heads=4, max_sequence_length=2048, rope_theta=10000.0,
                    rms_norm_epsilon=1e-5, tie_word_embeddings=False),
    ),
    "llama-baby": Preset(
        "gpt-baby's size with the Llama block, for characters: 4 layers, d=128, h=4, SwiGLU 344, 800k parameters.",
        LlamaConfig(vocabulary_size=65, num_layers=4, num_heads=4, hidden_dim=128, intermediate_dim=344,
                    max_sequence_length=64, rope_theta=10000.0),
    ),
    "llama-nano": Preset(
        "Tests: 2 layers, d=32, 4 heads, 2 key/value heads, context 32.",
        LlamaConfig(vocabulary_size=100, num_layers=2, num_heads=4, hidden_dim=32, intermediate_dim=64,
                    num_key_value_heads=2, max_sequence_length=32),
    ),
}
