"""The encoder-decoder family's config, the one list of its sizes and flags, and its
presets, instances of it: the paper's, Marian's opus-mt and BART's."""

from dataclasses import dataclass

from zoo.models.config import ModelConfig, Preset


@dataclass(frozen=True)
class EncoderDecoderConfig(ModelConfig):
    """The encoder-decoder's sizes and flags: `EncoderDecoder`'s constructor
    arguments, and its presets.

    Attributes:
        vocabulary_size: target V (and source V when shared).
        source_vocabulary_size: source V when embeddings are not shared;
            defaults to `vocabulary_size`.
        num_layers: N for the encoder and the decoder (6 in the paper).
        num_heads, hidden_dim, intermediate_dim: h, d_model, d_ff.
        max_sequence_length: longest source or target sequence.
        dropout: P_drop, applied to sub-layer outputs and to the sums of
            embeddings and positions (0.1 in the paper).
        position: "sinusoidal" (the paper), "learned" (BART),
            "sinusoidal_halves" (the paper's sines and cosines with the
            sines in the first half of the channels: Marian), or
            "relative" (T5: no absolute positions; a learned bias per head
            and relative-position bucket on the self-attention logits,
            one table per stack, `RelativePositionBias`).
        relative_attention_num_buckets, relative_attention_max_distance:
            the buckets of "relative" positions (32 and 128 in T5).
        position_offset: rows of a learned position table before position
            0's: BART's `BartLearnedPositionalEmbedding` keeps 2 (the table
            has max_sequence_length + 2 rows, position p reads row p + 2).
        share_embeddings: one token table for source and target (the
            paper shares them over a joint BPE vocabulary).
        share_positions: with `share_embeddings`, the encoder and the
            decoder share the positions too (one token-and-position layer);
            False gives each stack a learned position table of its own
            under the one token table (BART's `encoder.embed_positions`
            and `decoder.embed_positions`). Without `share_embeddings` each
            stack has its own layer anyway.
        tie_output: the pre-softmax projection reuses the target embedding
            table (the paper, section 3.4).
        norm_first: False (post-LN, the paper) or True (pre-LN, with final
            LayerNorms after each stack).
        activation: "relu" (the paper), "silu" (swish: Marian), "gelu"
            (BART) or "gelu_approximate" (T5 v1.1's gated GELU).
        gated_feed_forward: the gated feed-forward network, act(x W_0) *
            x W_1 (T5 v1.1 and Flan-T5's "gated-gelu"; Shazeer 2020).
        normalization: "layer_norm" (the paper) or "rms_norm" (T5's
            layer norm: no mean subtraction, no offset).
        use_bias: biases in the projections and norms (T5 has none).
        attention_scale: the attention logits' scale; None for the
            paper's 1/sqrt(d_k), 1.0 for T5 (which folds it into the
            initialization).
        head_dim: d_k, the width of one head; None for d_model / h (T5's
            `d_kv`).
        scale_tied_output: the decoder output times d_model**-0.5 before
            the tied output layer (T5 v1.0's tied `lm_head`).
        layer_norm_epsilon: 1e-6 as the reference tensor2tensor code.
        scale_embeddings: token embeddings times sqrt(d_model) before the
            positions are added (the paper, section 3.4; Marian's
            `scale_embedding`).
        final_logits_bias: a learned bias over the target vocabulary
            added to the logits (Marian's and BART's `final_logits_bias`).
        layernorm_embedding: a LayerNorm on the sum of token and position
            embeddings, before dropout, in each stack (BART's
            `layernorm_embedding`, from fairseq).

    Example:

    ```python
    config = EncoderDecoderConfig(vocabulary_size=40, num_layers=2, num_heads=2, hidden_dim=16)
    config.source_vocabulary_size  # 40: one shared vocabulary
    config.replace(vocabulary_size=60).source_vocabulary_size  # 60
    ```

    References:
        Vaswani et al. 2017, Table 3 (the base and big models' sizes);
        Lewis et al. 2020 (BART), section 2.1 and transformers' `BartModel`;
        Raffel et al. 2020 (T5), section 2.1 and transformers' `T5Model`.
    """

    vocabulary_size: int
    num_layers: int
    num_heads: int
    hidden_dim: int
    intermediate_dim: int = None
    max_sequence_length: int = 256
    source_vocabulary_size: int = None
    dropout: float = 0.1
    position: str = "sinusoidal"
    share_embeddings: bool = True
    tie_output: bool = True
    norm_first: bool = False
    activation: str = "relu"
    layer_norm_epsilon: float = 1e-6
    scale_embeddings: bool = True
    final_logits_bias: bool = False
    position_offset: int = 0
    share_positions: bool = True
    layernorm_embedding: bool = False
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    normalization: str = "layer_norm"
    use_bias: bool = True
    gated_feed_forward: bool = False
    attention_scale: float = None
    head_dim: int = None
    scale_tied_output: bool = False

    positive = ("vocabulary_size", "source_vocabulary_size", "num_layers", "num_heads", "hidden_dim",
                "max_sequence_length")

    def resolve(self):
        return {
            "source_vocabulary_size": self.source_vocabulary_size or self.vocabulary_size,
            "intermediate_dim": self.intermediate_dim or 4 * self.hidden_dim,
        }

    def check(self):
        super().check()
        offset = self.position_offset
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise ValueError(f"`position_offset` must be a non-negative integer; got {self.position_offset!r}.")
        if self.position_offset and self.position != "learned":
            raise ValueError(
                f"`position_offset` is an offset into a learned position table; got position={self.position!r}."
            )
        if self.position == "relative" and not self.share_embeddings:
            raise ValueError("position='relative' (T5) shares one token table between the stacks.")
        if self.scale_tied_output and not self.tie_output:
            raise ValueError("`scale_tied_output` scales the input of a tied output layer; it needs tie_output=True.")
        if self.share_embeddings and self.source_vocabulary_size != self.vocabulary_size:
            raise ValueError(
                "`share_embeddings=True` needs one vocabulary: got source_vocabulary_size="
                f"{self.source_vocabulary_size} and vocabulary_size={self.vocabulary_size}."
            )


# Vaswani et al. 2017's sizes (Table 3), small ones for Multi30k on a CPU and tests, Marian's opus-mt and BART.
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
    "opus-mt": Preset(
        "Marian's opus-mt translation models (Helsinki-NLP/opus-mt-de-en's config): the base model with swish, "
        "sines-then-cosines positions and a final logits bias.",
        EncoderDecoderConfig(vocabulary_size=58101, num_layers=6, num_heads=8, hidden_dim=512,
                             intermediate_dim=2048, max_sequence_length=512, dropout=0.1,
                             position="sinusoidal_halves", activation="silu", layer_norm_epsilon=1e-5,
                             final_logits_bias=True),
    ),
    "opus-mt-tiny": Preset(
        "A tiny Marian for tests: 2+2 layers, d=32, h=4.",
        EncoderDecoderConfig(vocabulary_size=1000, num_layers=2, num_heads=4, hidden_dim=32,
                             intermediate_dim=64, max_sequence_length=64, dropout=0.0,
                             position="sinusoidal_halves", activation="silu", layer_norm_epsilon=1e-5,
                             final_logits_bias=True),
    ),
    "bart-base": Preset(
        "BART base (facebook/bart-base's config, Lewis et al. 2020): 6+6 post-LN layers, d=768, h=12, GELU, "
        "learned positions (offset 2) for each stack, LayerNorm on the embeddings, a final logits bias.",
        EncoderDecoderConfig(vocabulary_size=50265, num_layers=6, num_heads=12, hidden_dim=768,
                             intermediate_dim=3072, max_sequence_length=1024, dropout=0.1, position="learned",
                             position_offset=2, share_positions=False, layernorm_embedding=True,
                             activation="gelu", layer_norm_epsilon=1e-5, scale_embeddings=False,
                             final_logits_bias=True),
    ),
    "bart-tiny": Preset(
        "A tiny BART for tests: 2+2 layers, d=32, h=4.",
        EncoderDecoderConfig(vocabulary_size=1000, num_layers=2, num_heads=4, hidden_dim=32,
                             intermediate_dim=64, max_sequence_length=64, dropout=0.0, position="learned",
                             position_offset=2, share_positions=False, layernorm_embedding=True,
                             activation="gelu", layer_norm_epsilon=1e-5, scale_embeddings=False,
                             final_logits_bias=True),
    ),
}

# T5's shapes (Raffel et al. 2020): v1.0's t5-small, and v1.1's Flan-T5 (Chung et al. 2022).
_T5 = dict(position="relative", normalization="rms_norm", use_bias=False, attention_scale=1.0, norm_first=True,
           scale_embeddings=False, layer_norm_epsilon=1e-6, max_sequence_length=512, dropout=0.1)
PRESETS.update({
    "t5-small": Preset(
        "T5 v1.0 small (t5-small's config, Raffel et al. 2020): 6+6 pre-norm layers, d=512, h=8, d_ff=2048, ReLU, "
        "RMSNorm, relative position buckets, no biases, the output tied and rescaled.",
        EncoderDecoderConfig(vocabulary_size=32128, num_layers=6, num_heads=8, hidden_dim=512, intermediate_dim=2048,
                             head_dim=64, activation="relu", scale_tied_output=True, **_T5),
    ),
    "flan-t5-small": Preset(
        "Flan-T5 small (google/flan-t5-small's config, T5 v1.1): 8+8 layers, d=512, h=6 of width 64, d_ff=1024, "
        "gated GELU, an untied output layer.",
        EncoderDecoderConfig(vocabulary_size=32128, num_layers=8, num_heads=6, hidden_dim=512, intermediate_dim=1024,
                             head_dim=64, activation="gelu_approximate", gated_feed_forward=True, tie_output=False,
                             **_T5),
    ),
    "flan-t5-base": Preset(
        "Flan-T5 base (google/flan-t5-base's config, T5 v1.1): 12+12 layers, d=768, h=12, d_ff=2048, gated GELU, "
        "an untied output layer.",
        EncoderDecoderConfig(vocabulary_size=32128, num_layers=12, num_heads=12, hidden_dim=768, intermediate_dim=2048,
                             head_dim=64, activation="gelu_approximate", gated_feed_forward=True, tie_output=False,
                             **_T5),
    ),
    "t5-tiny": Preset(
        "A tiny T5 v1.1 for tests: 2+2 layers, d=32, h=4.",
        EncoderDecoderConfig(vocabulary_size=1000, num_layers=2, num_heads=4, hidden_dim=32, intermediate_dim=64,
                             activation="gelu_approximate", gated_feed_forward=True, tie_output=False,
                             **{**_T5, "max_sequence_length": 64, "dropout": 0.0}),
    ),
})
