"""The model families, each registered once, beside its models.

A family is one typed record: its name (the presets' `family`), its
backbone class, its tasks and the module of its weight map (its
weights' names in Hugging Face and keras-hub checkpoints). The
factory (`zoo.build`), the checkpoint drivers (`zoo.checkpoints`), the
`zoo` command and the explorer read this registry; none of them names a
family in a branch of its own.

    from zoo.families import FAMILIES
    FAMILIES["llama"].tasks  # {"causal_lm": Task(LlamaCausalLM, ())}
"""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Task:
    """A task model over a family's backbone: its class, and the constructor
    arguments of its own that `zoo.build` accepts beside the backbone's
    (`num_classes`, ...). `model_class` None is the backbone itself (the
    encoder-decoder's "seq2seq")."""

    model_class: type = None
    arguments: tuple = ()


@dataclass(frozen=True)
class Family:
    """One model family.

    Attributes:
        name: the presets' `family` ("gpt", "llama", "gemma", ...).
        backbone: the backbone class, built from a preset's config.
        tasks: {task name: `Task`}; `zoo.build(name, task=None)` is the
            backbone.
        weight_map: a function that imports and returns the module that
            maps the family to Hugging Face and keras-hub checkpoints
            (`zoo.models.llama.weight_map`), or None for a family without
            one; the module is imported when first read.
        description: one line for listings.
        presets: {preset name: `zoo.models.config.Preset`}, instances of
            the family's config (`zoo.build(name)`).
    """

    name: str
    backbone: type
    tasks: dict = field(default_factory=dict)
    weight_map: object = None
    description: str = ""
    presets: dict = field(default_factory=dict)

    @property
    def config(self):
        """The family's config class (`zoo.models.config.ModelConfig`)."""
        return self.backbone.config_class

    def weight_map_module(self):
        """The family's weight map module, or None."""
        return None if self.weight_map is None else self.weight_map()

    def owns(self, model):
        """Whether `model` (a backbone, or a task with a `.backbone`) is of this family."""
        return isinstance(getattr(model, "backbone", model), self.backbone)


FAMILIES = {}


def register(family):
    """Adds `family` to the registry (once: a second family of the same
    name is an error) and returns it."""
    if family.name in FAMILIES:
        raise ValueError(f"A family named {family.name!r} is registered already.")
    FAMILIES[family.name] = family
    return family


def get(name):
    """The family called `name`; a ValueError naming the registered ones for another."""
    if name not in FAMILIES:
        raise ValueError(f"Unknown family {name!r}; expected one of {', '.join(map(repr, FAMILIES))}.")
    return FAMILIES[name]


def of_model(model):
    """The family of a zoo model (a backbone or a task on one), or None."""
    for family in FAMILIES.values():
        if family.owns(model):
            return family
    return None
