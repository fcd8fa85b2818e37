"""The ranking stage: signals, MMR diversity and the finalizer over a retrieved candidate set."""

from .mmr import mmr
from .pipeline import RankingPipeline, RankingWeights, SignalPlugin, finalize, retrieval_only
from .signals import SIGNAL_NAMES, SIGNALS, SignalContext

__all__ = ["RankingPipeline", "RankingWeights", "SignalPlugin", "SIGNAL_NAMES", "SIGNALS", "SignalContext",
           "finalize", "mmr", "retrieval_only"]
