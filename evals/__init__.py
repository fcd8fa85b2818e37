"""Quality evaluation of memoria-pg on public retrieval benchmarks (LoCoMo, SciFact, HotpotQA, LongMemEval, MS MARCO).

Not part of the memoria-pg wheel: install it from a checkout with `pip install -e ./evals` and run
`python -m evals` (or `memoria-pg eval`, which delegates here). `run_eval(...)` runs it;
`evals.cli.eval_command` is the click command around it. It uses only memoria-pg's public API.
"""

from .data import DataMissing, Dataset, Document, Query, default_data_root
from .results import EvalReport
from .runner import DATASETS, run_eval

__all__ = ["DATASETS", "DataMissing", "Dataset", "Document", "EvalReport", "Query", "default_data_root", "run_eval"]
