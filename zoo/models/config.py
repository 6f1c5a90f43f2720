"""A family's config: the one list of its sizes and variant flags.

Each family declares a frozen dataclass of `ModelConfig` whose fields are
its backbone's constructor arguments, in order, with their defaults. The
backbone takes them (`LlamaBackbone(vocabulary_size=..., ...)` or
`LlamaBackbone(config=LlamaConfig(...))`), keeps the instance as
`backbone.config`, and `get_config()` echoes its fields, so a `.keras` file
stores plain constructor arguments. A family's presets are instances of it
(`Preset(description, LlamaConfig(...))`), and `zoo.describe`, the factory's
overrides and the checkpoint config maps read the same fields.

    config = LlamaConfig(vocabulary_size=100, num_layers=2, num_heads=4, hidden_dim=32, intermediate_dim=64)
    config.replace(num_layers=4).num_layers  # 4
    LlamaBackbone(config=config).config == config  # True
"""

import dataclasses
import numbers
from dataclasses import dataclass
from typing import ClassVar

from zoo.renamed import current_names


@dataclass(frozen=True)
class ModelConfig:
    """Base of the families' configs.

    Subclasses are frozen dataclasses. `positive` names the fields that
    must be positive integers and `rates` those that must be in [0, 1)
    (both checked when the config is made), and `resolve()` returns the
    values that stand for a None (`intermediate_dim` None is 4 * d, ...),
    so that the config always holds what was built, and `check()` refuses
    values that do not fit together: by default a width `hidden_dim` that
    the `num_heads` heads do not divide (where a family has `head_dim`, a
    given one sets the heads' width instead).
    """

    positive: ClassVar[tuple] = ()
    rates: ClassVar[tuple] = ("dropout",)
    former_names: ClassVar[dict] = {}  # {former field name: current}, accepted with a warning for one release

    def __post_init__(self):
        resolved = {name: value for name, value in self.resolve().items() if value != getattr(self, name)}
        for name, value in resolved.items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "_resolved", frozenset(resolved))  # not a field: a derived value follows a change
        for name in self.positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"`{name}` must be a positive integer; got {value!r}.")
        for name in self.rates:
            value = getattr(self, name)
            if not isinstance(value, numbers.Real) or isinstance(value, bool) or not 0 <= value < 1:
                raise ValueError(f"`{name}` must be a rate in [0, 1); got {value!r}.")
        self.check()

    def resolve(self):
        """{field: value} for fields whose given value stands for another
        (a None default); none by default."""
        return {}

    def check(self):
        """Raises ValueError for values that do not fit together."""
        if getattr(self, "head_dim", None) is None and self.hidden_dim % self.num_heads:
            alternative = ", or pass `head_dim`" if "head_dim" in self.argument_names() else ""
            raise ValueError(
                f"hidden_dim={self.hidden_dim} must be divisible by num_heads={self.num_heads} "
                f"(each head is hidden_dim / num_heads wide){alternative}."
            )

    @classmethod
    def argument_names(cls):
        """The fields, in the constructor's order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def take(cls, args, kwargs):
        """(config, the other keyword arguments) from a backbone's
        constructor call: positional arguments in field order, keyword
        arguments by field name, or `config=` an instance."""
        given = kwargs.pop("config", None)
        if given is not None:
            if args or set(kwargs) & set(cls.argument_names()):
                raise TypeError(f"Pass either `config=` or {cls.__name__}'s fields, not both.")
            if not isinstance(given, cls):
                raise TypeError(f"`config` must be a {cls.__name__}; got {type(given).__name__}.")
            return given, kwargs
        kwargs = cls.current_names(kwargs)
        names = cls.argument_names()
        if len(args) > len(names):
            raise TypeError(f"{cls.__name__} takes at most {len(names)} positional arguments; got {len(args)}.")
        values = dict(zip(names, args))
        twice = sorted(set(values) & set(kwargs))
        if twice:
            raise TypeError(f"Got {twice[0]!r} both by position and by name.")
        values.update({name: kwargs.pop(name) for name in names if name in kwargs})
        missing = [f.name for f in dataclasses.fields(cls)
                   if f.name not in values and f.default is dataclasses.MISSING]
        if missing:
            raise TypeError(f"{cls.__name__} needs {', '.join(map(repr, missing))}.")
        return cls(**values), kwargs

    @classmethod
    def current_names(cls, values):
        """`values` ({field: value}) with the former names of fields
        replaced by their current ones, each with a DeprecationWarning."""
        return current_names(values, cls.former_names, cls.__name__)

    def replace(self, **changes):
        """A copy with `changes` (field names; another name is a ValueError)."""
        changes = self.current_names(changes)
        unknown = sorted(set(changes) - set(self.argument_names()))
        if unknown:
            expected = ", ".join(self.argument_names())
            raise ValueError(f"Unknown field(s) {unknown} of {type(self).__name__}; expected some of {expected}.")
        derived_again = {name: None for name in self._resolved}  # from the changed fields
        return dataclasses.replace(self, **{**derived_again, **changes})

    def to_dict(self):
        """{field: value}, the constructor arguments as built (what `get_config` stores)."""
        return {name: getattr(self, name) for name in self.argument_names()}

    def arguments(self):
        """{field: value} as given: a value `resolve()` derived is None
        again, so that an override of the fields it came from changes it
        too (`zoo.build("transformer-tiny", vocabulary_size=50)`)."""
        return {**self.to_dict(), **{name: None for name in self._resolved}}


@dataclass(frozen=True)
class Preset:
    """A named configuration of a family: one line for listings, and the
    config (`ModelConfig` subclass instance) that `zoo.build` builds."""

    description: str
    config: ModelConfig
