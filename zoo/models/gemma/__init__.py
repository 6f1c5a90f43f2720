"""The Gemma 3 family (the text models): its config, models, presets and weight map, registered once."""

from zoo.families import Family, Task, register
from zoo.models.gemma.config import PRESETS
from zoo.models.gemma.model import Gemma3Backbone, Gemma3CausalLM, Gemma3Config

__all__ = ['Gemma3Backbone', 'Gemma3CausalLM', 'Gemma3Config', 'PRESETS']

register(
    Family(
        "gemma",
        Gemma3Backbone,
        tasks={"causal_lm": Task(Gemma3CausalLM)},
        weight_map="zoo.models.gemma.weight_map",
        description="Gemma 3: sandwich norms, GeGLU, q/k norms, sliding-window local layers",
        presets=PRESETS,
    )
)
