"""The Gemma 3 family's presets: a description and a config each."""

from zoo.models.config import Preset
from zoo.models.gemma.model import Gemma3Config

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
