"""Quality evaluation on public retrieval benchmarks (LoCoMo, SciFact, HotpotQA, LongMemEval).

`run_eval(...)` runs it; `memoria_pg.eval.cli.eval_command` is the click command around it.
"""

from .data import DataMissing, Dataset, Document, Query, default_data_root
from .results import EvalReport
from .runner import DATASETS, run_eval

__all__ = ["DATASETS", "DataMissing", "Dataset", "Document", "EvalReport", "Query", "default_data_root",
           "run_eval"]
