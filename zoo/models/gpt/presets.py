"""The GPT family's presets: a description and a config each."""

from zoo.models.config import Preset
from zoo.models.gpt.model import GPTConfig

# The papers' sizes (GPT-1, GPT-2), and small ones for characters and tests.
PRESETS = {
    "gpt2-small": Preset(
        "GPT-2 124M: 12 layers, d=768, h=12, context 1024.",
        GPTConfig(vocabulary_size=50257, num_layers=12, num_heads=12, hidden_dim=768,
                  intermediate_dim=3072, max_sequence_length=1024, dropout=0.1),
    ),
    "gpt2-medium": Preset(
        "GPT-2 355M: 24 layers, d=1024, h=16, context 1024.",
        GPTConfig(vocabulary_size=50257, num_layers=24, num_heads=16, hidden_dim=1024,
                  intermediate_dim=4096, max_sequence_length=1024, dropout=0.1),
    ),
    "gpt1": Preset(
        "GPT-1 (post-LN): 12 layers, d=768, h=12, context 512, vocabulary 40,478.",
        GPTConfig(vocabulary_size=40478, num_layers=12, num_heads=12, hidden_dim=768,
                  intermediate_dim=3072, max_sequence_length=512, dropout=0.1,
                  norm_first=False, activation="gelu"),
    ),
    "gpt-baby": Preset(
        "nanoGPT's CPU 'baby GPT' for characters: 4 layers, d=128, h=4, block 64.",
        GPTConfig(vocabulary_size=65, num_layers=4, num_heads=4, hidden_dim=128,
                  intermediate_dim=512, max_sequence_length=64, dropout=0.0),
    ),
    "gpt-nano": Preset(
        "Tests: 2 layers, d=32, h=4, context 32 (minGPT's gpt-nano width was 48).",
        GPTConfig(vocabulary_size=100, num_layers=2, num_heads=4, hidden_dim=32,
                  intermediate_dim=64, max_sequence_length=32, dropout=0.0),
    ),
}
