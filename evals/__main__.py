"""`python -m evals [OPTIONS]`: the retrieval quality evaluation (the options are `memoria-pg eval`'s)."""

from .cli import eval_command

if __name__ == "__main__":
    eval_command(prog_name="python -m evals")
