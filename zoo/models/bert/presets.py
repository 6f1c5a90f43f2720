"""The BERT family's presets: a description and a config each."""

from zoo.models.config import Preset
from zoo.models.bert.model import BertConfig

# Devlin et al. 2019's sizes, and small ones for SST-2 on a CPU and tests.
PRESETS = {
    "bert-base": Preset(
        "BERT-base 110M: 12 layers, d=768, h=12, vocabulary 30,522.",
        BertConfig(vocabulary_size=30522, num_layers=12, num_heads=12, hidden_dim=768,
                   intermediate_dim=3072, max_sequence_length=512, dropout=0.1),
    ),
    "bert-large": Preset(
        "BERT-large 340M: 24 layers, d=1024, h=16, vocabulary 30,522.",
        BertConfig(vocabulary_size=30522, num_layers=24, num_heads=16, hidden_dim=1024,
                   intermediate_dim=4096, max_sequence_length=512, dropout=0.1),
    ),
    "bert-small": Preset(
        "SST-2 on a CPU: 4 layers, d=256, h=4, sequence 64.",
        BertConfig(vocabulary_size=8000, num_layers=4, num_heads=4, hidden_dim=256,
                   intermediate_dim=1024, max_sequence_length=64, dropout=0.1),
    ),
    "bert-tiny": Preset(
        "Tests: 2 layers, d=32, h=4, sequence 32.",
        BertConfig(vocabulary_size=100, num_layers=2, num_heads=4, hidden_dim=32,
                   intermediate_dim=64, max_sequence_length=32, dropout=0.0),
    ),
}
