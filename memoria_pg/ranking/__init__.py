"""The ranking stage: signals, MMR diversity and the finalizer over a retrieved candidate set."""

from .mmr import mmr
from .pipeline import RankingPipeline, RankingStage, RankingWeights, SignalPlugin, finalize
from .signals import SIGNAL_NAMES, SIGNALS, SignalContext

__all__ = [
    "SIGNALS",
    "SIGNAL_NAMES",
    "RankingPipeline",
    "RankingStage",
    "RankingWeights",
    "SignalContext",
    "SignalPlugin",
    "finalize",
    "mmr",
]
