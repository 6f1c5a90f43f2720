"""The encoder-decoder Transformer family's presets: a description and a config each."""

from zoo.models.config import Preset
from zoo.models.transformer.model import EncoderDecoderConfig

# Vaswani et al. 2017's sizes (Table 3), and small ones for Multi30k on a CPU and tests.
PRESETS = {
    "transformer-base": Preset(
        "Vaswani et al. 2017 base model (Table 3): N=6, d=512, d_ff=2048, h=8.",
        EncoderDecoderConfig(vocabulary_size=37000, num_layers=6, num_heads=8, hidden_dim=512,
                             intermediate_dim=2048, max_sequence_length=256, dropout=0.1),
    ),
    "transformer-big": Preset(
        "Vaswani et al. 2017 big model (Table 3): N=6, d=1024, d_ff=4096, h=16.",
        EncoderDecoderConfig(vocabulary_size=37000, num_layers=6, num_heads=16, hidden_dim=1024,
                             intermediate_dim=4096, max_sequence_length=256, dropout=0.3),
    ),
    "transformer-small": Preset(
        "A small translation model for Multi30k on a CPU: 3+3 layers, d=256, h=8.",
        EncoderDecoderConfig(vocabulary_size=8000, num_layers=3, num_heads=8, hidden_dim=256,
                             intermediate_dim=1024, max_sequence_length=64, dropout=0.1),
    ),
    "transformer-tiny": Preset(
        "Tests and the synthetic demo: 2+2 layers, d=64, h=4.",
        EncoderDecoderConfig(vocabulary_size=1000, num_layers=2, num_heads=4, hidden_dim=64,
                             intermediate_dim=128, max_sequence_length=32, dropout=0.0),
    ),
}
