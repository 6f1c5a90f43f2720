"""The Transformer's layers, written with `keras.ops` only (any backend)."""

from zoo.layers.add_norm import AddNorm
from zoo.layers.attention import attention_weights, fused_attention, merge_masks, scaled_dot_product_attention
from zoo.layers.decoder_block import DecoderBlock
from zoo.layers.encoder_block import EncoderBlock
from zoo.layers.feed_forward import FeedForward
from zoo.layers.l2_normalize import L2Normalize
from zoo.layers.layer_normalization import LayerNormalization
from zoo.layers.lora_dense import LoraDense
from zoo.layers.masked_lm_transform import MaskedLMTransform
from zoo.layers.mean_pooling import MeanPooling
from zoo.layers.multi_head_attention import MultiHeadAttention
from zoo.layers.output_bias import OutputBias
from zoo.layers.position_embedding import PositionEmbedding
from zoo.layers.relative_position_bias import RelativePositionBias
from zoo.layers.rms_norm import RMSNorm
from zoo.layers.rotary_embedding import RotaryEmbedding
from zoo.layers.sinusoidal_position_encoding import SinusoidalPositionEncoding
from zoo.layers.token_and_position_embedding import TokenAndPositionEmbedding
from zoo.layers.token_embedding import TokenEmbedding

__all__ = [
    "AddNorm",
    "DecoderBlock",
    "EncoderBlock",
    "FeedForward",
    "L2Normalize",
    "LayerNormalization",
    "LoraDense",
    "MaskedLMTransform",
    "MeanPooling",
    "MultiHeadAttention",
    "OutputBias",
    "PositionEmbedding",
    "RelativePositionBias",
    "RMSNorm",
    "RotaryEmbedding",
    "SinusoidalPositionEncoding",
    "TokenAndPositionEmbedding",
    "TokenEmbedding",
    "attention_weights",
    "fused_attention",
    "merge_masks",
    "scaled_dot_product_attention",
]
