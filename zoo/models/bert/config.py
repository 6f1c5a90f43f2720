"""The BERT family's config, the one list of its sizes and flags, and its
presets, instances of it."""

from dataclasses import dataclass

from zoo.models.config import ModelConfig, Preset


@dataclass(frozen=True)
class BertConfig(ModelConfig):
    """BERT's sizes and flags: `BertBackbone`'s constructor arguments, and
    its presets.

    Attributes:
        vocabulary_size, num_layers, num_heads, hidden_dim: V, N, h, d.
        intermediate_dim: d_ff (4 * d in BERT).
        max_sequence_length: 512 in BERT.
        num_segments: 2 (sentence A / B).
        dropout: 0.1 in BERT.
        activation: "gelu" (exact, the paper) or "gelu_approximate"
            (what keras-hub's BERT uses).
        layer_norm_epsilon: 1e-12 as BERT.

    Example:

    ```python
    config = BertConfig(vocabulary_size=30, num_layers=2, num_heads=2, hidden_dim=16, max_sequence_length=16)
    config.replace(num_layers=4).num_layers  # 4
    ```

    References:
        Devlin et al. 2019 (BERT), section 3; the released code's
        `bert_config.json`.
    """

    vocabulary_size: int
    num_layers: int
    num_heads: int
    hidden_dim: int
    intermediate_dim: int = None
    max_sequence_length: int = 512
    num_segments: int = 2
    dropout: float = 0.1
    activation: str = "gelu"
    layer_norm_epsilon: float = 1e-12
    initializer_range: float = 0.02

    positive = ("vocabulary_size", "num_layers", "num_heads", "hidden_dim", "max_sequence_length", "num_segments")

    def resolve(self):
        return {
            "intermediate_dim": self.intermediate_dim or 4 * self.hidden_dim,
        }


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
