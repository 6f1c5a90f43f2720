"""The GPT family's config, the one list of its sizes and flags, and its
presets, instances of it."""

from dataclasses import dataclass

from zoo.models.config import ModelConfig, Preset


@dataclass(frozen=True)
class GPTConfig(ModelConfig):
    """GPT's sizes and flags: `GPTBackbone`'s constructor arguments, and its
    presets.

    Attributes:
        vocabulary_size: V.
        num_layers: N.
        num_heads: h.
        hidden_dim: d.
        intermediate_dim: d_ff (4 * d in GPT).
        max_sequence_length: the context length (learned positions).
        dropout: residual, attention and embedding dropout.
        norm_first: True for GPT-2 (pre-LN + final LayerNorm), False for
            GPT-1 (post-LN, no final LayerNorm).
        activation: "gelu_approximate" (GPT-2) by default.
        layer_norm_epsilon: 1e-5 as GPT-2.
        initializer_range: std of the normal initialisation (0.02); the
            projections into the residual stream use
            initializer_range / sqrt(2 * num_layers), GPT-2's scaled init.
        use_bias: whether the projections and LayerNorms have biases; True
            for GPT-2, False for nanoGPT's `bias=False`.

    Example:

    ```python
    config = GPTConfig(vocabulary_size=50, num_layers=2, num_heads=2, hidden_dim=16)
    config.intermediate_dim  # 64: None is 4 d
    config.replace(num_layers=4).num_layers  # 4
    ```

    References:
        Radford et al. 2018 (GPT-1) and 2019 (GPT-2); nanoGPT's
        `GPTConfig` (`bias=False`).
    """

    vocabulary_size: int
    num_layers: int
    num_heads: int
    hidden_dim: int
    intermediate_dim: int = None
    max_sequence_length: int = 1024
    dropout: float = 0.0
    norm_first: bool = True
    activation: str = "gelu_approximate"
    layer_norm_epsilon: float = 1e-5
    initializer_range: float = 0.02
    use_bias: bool = True

    positive = ("vocabulary_size", "num_layers", "num_heads", "hidden_dim", "max_sequence_length")

    def resolve(self):
        return {
            "intermediate_dim": self.intermediate_dim or 4 * self.hidden_dim,
        }


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
