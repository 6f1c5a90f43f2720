"""Every preset by name, read from the families' registry.

A family keeps its presets beside its models, as instances of its config
(`zoo.models.llama.PRESETS`: `Preset(description, LlamaConfig(...))`).
This module lists them all, in the order the families register, as data:
`PRESETS[name]` is `{"family", "description", "config"}`, the config a dict
of the backbone's constructor arguments.

Sizes follow the papers and the published checkpoints:
- transformer-base / -big: Vaswani et al. 2017, Table 3.
- gpt2-small / -medium: Radford et al. 2019; gpt1: Radford et al. 2018.
- bert-base / -large: Devlin et al. 2019.
- smollm2-135m, qwen2.5-0.5b, qwen3-0.6b, llama-3.2-1b, tinyllama-1.1b,
  gemma3-270m: the shapes of the published checkpoints' config.json
  (weights come from `zoo.from_pretrained` on their folders).
- tiny presets for tests, recipes and CPUs.
"""

from collections.abc import Mapping

from zoo import models  # noqa: F401  (registers the families and their presets)
from zoo.families import FAMILIES


class _Presets(Mapping):
    """Every family's presets, read from the registry when asked (so a
    preset added to a family's `presets` is listed and built at once)."""

    def _all(self):
        return {
            name: {"family": family.name, "description": preset.description, "config": preset.config.arguments()}
            for family in FAMILIES.values()
            for name, preset in family.presets.items()
        }

    def __getitem__(self, name):
        return self._all()[name]

    def __iter__(self):
        return iter(self._all())

    def __len__(self):
        return len(self._all())


PRESETS = _Presets()
