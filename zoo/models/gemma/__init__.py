"""The Gemma 3 family (the text models): its config, models, presets and weight map, registered once."""

from zoo.families import Family, Task, register
from zoo.models.gemma.config import PRESETS
from zoo.models.gemma.model import Gemma3Backbone, Gemma3CausalLM, Gemma3Config

__all__ = ['Gemma3Backbone', 'Gemma3CausalLM', 'Gemma3Config', 'PRESETS']


def _weight_map():
    from zoo.models.gemma import weight_map

    return weight_map


register(
    Family(
        "gemma",
        Gemma3Backbone,
        tasks={"causal_lm": Task(Gemma3CausalLM)},
        weight_map=_weight_map,
        description="Gemma 3: sandwich norms, GeGLU, q/k norms, sliding-window local layers",
        presets=PRESETS,
    )
)
