"""The GPT family (GPT-1, GPT-2): its config, models, presets and weight map, registered once."""

from zoo.families import Family, Task, register
from zoo.models.gpt.config import PRESETS
from zoo.models.gpt.model import GPTBackbone, GPTCausalLM, GPTConfig

__all__ = ['GPTBackbone', 'GPTCausalLM', 'GPTConfig', 'PRESETS']


def _weight_map():
    from zoo.models.gpt import weight_map

    return weight_map


register(
    Family(
        "gpt",
        GPTBackbone,
        tasks={"causal_lm": Task(GPTCausalLM)},
        weight_map=_weight_map,
        description="GPT-1 and GPT-2: learned positions, LayerNorm, GELU",
        presets=PRESETS,
    )
)
