"""The Transformer families as functional Keras models."""

# Quantization helpers, beside the models (`__all__` lists the model classes).
from zoo.models.base import QUANTIZATION_MODES, check_quantization_mode, quantization_mode  # noqa: F401
# The families register in this order, which is the order `zoo.list_presets()` gives.
from zoo.models.transformer import EncoderDecoder, EncoderDecoderConfig  # noqa: I001
from zoo.models.gpt import GPTBackbone, GPTCausalLM, GPTConfig
from zoo.models.llama import LlamaBackbone, LlamaCausalLM, LlamaConfig
from zoo.models.gemma import Gemma3Backbone, Gemma3CausalLM, Gemma3Config
from zoo.models.bert import BertBackbone, BertClassifier, BertConfig, BertMaskedLM, BertSentenceEncoder
from zoo.models.causal_lm import CausalLM
from zoo.models.decoder_stack import DecoderStack

__all__ = [
    "BertBackbone",
    "BertClassifier",
    "BertConfig",
    "BertMaskedLM",
    "BertSentenceEncoder",
    "CausalLM",
    "DecoderStack",
    "EncoderDecoder",
    "EncoderDecoderConfig",
    "Gemma3Backbone",
    "Gemma3CausalLM",
    "Gemma3Config",
    "GPTBackbone",
    "GPTCausalLM",
    "GPTConfig",
    "LlamaBackbone",
    "LlamaCausalLM",
    "LlamaConfig",
]
