"""The Llama family (Llama 3.2, Mistral, Qwen2.5/3, SmolLM2, TinyLlama): its config, models, presets and weight map, registered once."""

from zoo.families import Family, Task, register
from zoo.models.llama.config import PRESETS
from zoo.models.llama.model import LlamaBackbone, LlamaCausalLM, LlamaConfig

__all__ = ['LlamaBackbone', 'LlamaCausalLM', 'LlamaConfig', 'PRESETS']


def _weight_map():
    from zoo.models.llama import weight_map

    return weight_map


register(
    Family(
        "llama",
        LlamaBackbone,
        tasks={"causal_lm": Task(LlamaCausalLM)},
        weight_map=_weight_map,
        description="Llama, Mistral, Qwen2/3, SmolLM2, TinyLlama: RMSNorm, rotary, grouped-query attention, SwiGLU",
        presets=PRESETS,
    )
)
