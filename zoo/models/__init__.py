"""The three Transformer families as functional Keras models."""

from zoo.models.base import QUANTIZATION_MODES, check_quantization_mode, quantization_mode
from zoo.models.bert import BertBackbone, BertClassifier, BertMaskedLM, BertSentenceEncoder
from zoo.models.gpt import GPTBackbone, GPTCausalLM
from zoo.models.transformer import EncoderDecoder

__all__ = [
    "BertBackbone",
    "BertClassifier",
    "BertMaskedLM",
    "BertSentenceEncoder",
    "EncoderDecoder",
    "GPTBackbone",
    "GPTCausalLM",
    "QUANTIZATION_MODES",
    "check_quantization_mode",
    "quantization_mode",
]
