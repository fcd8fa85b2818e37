"""The revision a `memoria-pg db upgrade | downgrade` names, resolved before Alembic runs: an unknown
revision, a target on the wrong side of the database's, or a downgrade's losses are said up front."""

from __future__ import annotations

import re
from dataclasses import dataclass

import click

_RELATIVE = re.compile(r"(?P<anchor>[^+-]*)(?P<sign>[+-])(?P<steps>\d+)")


@dataclass(frozen=True)
class Revisions:
    """The migrations, oldest first (the history is linear): (revision, first line of its doc)."""

    chain: tuple[tuple[str, str], ...]

    @classmethod
    def load(cls) -> Revisions:
        from ..db import migrate

        return cls(tuple((rev, doc) for rev, _down, doc in migrate.history("")))

    def known(self) -> str:
        ids = [rev for rev, _ in self.chain]
        span = f"{ids[0]} to {ids[-1]}" if ids else "none"
        return f"the known revisions are {span}, base and head (`memoria-pg db history` lists them)"

    def index(self, revision: str | None) -> int:
        """The place of the database's revision in the chain (-1: base)."""
        if revision is None:
            return -1
        for i, (rev, _) in enumerate(self.chain):
            if rev == revision:
                return i
        raise click.ClickException(
            f"the database is at revision {revision!r}, which this memoria-pg does not know "
            "(was it migrated by a newer version?)"
        )

    def resolve(self, name: str, current: int) -> int:
        """The place of the revision NAME: base, head, an id (or its first characters, if only one
        revision starts with them), or relative: -N / +N from the database's, REV-N, REV+N."""
        relative = _RELATIVE.fullmatch(name)
        if relative:
            anchor = current if not relative["anchor"] else self._absolute(relative["anchor"], name)
            steps = int(relative["steps"]) * (1 if relative["sign"] == "+" else -1)
            target = anchor + steps
            if not -1 <= target < len(self.chain):
                raise click.ClickException(
                    f"revision {name!r} is {'past head' if target >= 0 else 'below base'}; {self.known()}"
                )
            return target
        return self._absolute(name, name)

    def _absolute(self, name: str, given: str) -> int:
        if name == "base":
            return -1
        if name in ("head", "heads"):
            return len(self.chain) - 1
        matches = [i for i, (rev, _) in enumerate(self.chain) if rev == name] or [
            i for i, (rev, _) in enumerate(self.chain) if rev.startswith(name)
        ]
        if len(matches) != 1:
            raise click.ClickException(f"unknown revision {given!r}; {self.known()}")
        return matches[0]

    def name(self, index: int) -> str:
        return "base" if index < 0 else self.chain[index][0]

    def shown(self, name: str, index: int) -> str:
        """NAME as the user gave it, with the revision it resolved to when that differs."""
        return name if name == self.name(index) else f"{name} ({self.name(index)})"

    def between(self, lower: int, upper: int) -> list[tuple[str, str]]:
        """The migrations a downgrade from `upper` to `lower` reverts, newest first."""
        return list(reversed(self.chain[lower + 1 : upper + 1]))


def downgrade_warning(revisions: Revisions, current: int, target: int) -> str:
    """The confirmation question of a downgrade: what it reverts, so what it may delete."""
    reverted = revisions.between(target, current)
    lines = [
        f"Downgrading from {revisions.name(current)} to {revisions.name(target)} reverts {len(reverted)} "
        f"migration{'s' if len(reverted) != 1 else ''}, dropping the tables, columns and functions they "
        "added and the data stored there (upgrading again does not bring it back):"
    ]
    if target < 0:
        lines[0] = lines[0][:-1] + ", which at base is every memory, its history and every API key:"
    lines += [f"  {rev}  {doc}" for rev, doc in reverted]
    lines.append("Continue?")
    return "\n".join(lines)
