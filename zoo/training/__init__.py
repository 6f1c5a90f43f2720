"""Training helpers shared by the recipes: schedules, optimizers, losses,
and the run plumbing (flags, output folder, callbacks, strategies, plots).

Stands alone: imports neither the models nor the data pipelines.
"""

from zoo.training.losses import MaskedAccuracy, MaskedSparseCrossentropy
from zoo.training.optimizers import adamw
from zoo.training.schedules import TransformerSchedule, WarmupCosineDecay

__all__ = ["MaskedAccuracy", "MaskedSparseCrossentropy", "TransformerSchedule", "WarmupCosineDecay", "adamw"]
