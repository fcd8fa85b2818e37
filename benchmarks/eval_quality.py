#!/usr/bin/env python
"""Retrieval quality on LoCoMo, SciFact, HotpotQA and LongMemEval, every configuration side by side.

    python benchmarks/eval_quality.py [--data PATH] [--datasets locomo,scifact,hotpotqa,longmemeval]
                                      [--limit-queries N] [--out results] [--dsn ADMIN_DSN] ...

The same command as `memoria-pg eval`; --help lists every option. See memoria_pg/eval/.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memoria_pg.eval.cli import eval_command  # noqa: E402

if __name__ == "__main__":
    eval_command(prog_name="eval_quality.py")
