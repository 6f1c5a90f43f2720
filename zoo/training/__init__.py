"""Training helpers: schedules, optimizers, losses, BLEU, the callbacks
that let a run die and resume (`checkpoints`), and distribution strategies.

Stands alone: imports neither the models nor the data pipelines.
"""

from zoo.training.bleu import corpus_bleu
from zoo.training.callbacks import Backup, BestModel, NonFiniteLossError, ResumableCSVLogger, TerminateOnNonFinite
from zoo.training.distribution import STRATEGIES, distribution_scope, start_distribution, worker_output
from zoo.training.losses import MaskedAccuracy, MaskedSparseCrossentropy
from zoo.training.optimizers import AdamEMAWarmup, adamw
from zoo.training.schedules import TransformerSchedule, WarmupCosineDecay

__all__ = [
    "AdamEMAWarmup",
    "STRATEGIES",
    "Backup",
    "BestModel",
    "MaskedAccuracy",
    "MaskedSparseCrossentropy",
    "NonFiniteLossError",
    "ResumableCSVLogger",
    "TerminateOnNonFinite",
    "TransformerSchedule",
    "WarmupCosineDecay",
    "adamw",
    "corpus_bleu",
    "distribution_scope",
    "start_distribution",
    "worker_output",
]
