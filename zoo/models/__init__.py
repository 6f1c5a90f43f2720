"""The Transformer families as functional Keras models."""

# Quantization helpers, beside the models (`__all__` lists the model classes).
from zoo.models.base import QUANTIZATION_MODES, check_quantization_mode, quantization_mode  # noqa: F401
from zoo.models.bert import BertBackbone, BertClassifier, BertMaskedLM, BertSentenceEncoder
from zoo.models.gemma import Gemma3Backbone, Gemma3CausalLM
from zoo.models.gpt import GPTBackbone, GPTCausalLM
from zoo.models.llama import LlamaBackbone, LlamaCausalLM
from zoo.models.transformer import EncoderDecoder

__all__ = [
    "BertBackbone",
    "BertClassifier",
    "BertMaskedLM",
    "BertSentenceEncoder",
    "EncoderDecoder",
    "Gemma3Backbone",
    "Gemma3CausalLM",
    "GPTBackbone",
    "GPTCausalLM",
    "LlamaBackbone",
    "LlamaCausalLM",
]
