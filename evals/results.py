"""What an evaluation produces: per configuration, per data set, per run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ConfigurationResult:
    name: str
    description: str
    status: str = "ok"  # ok | unavailable | failed | skipped
    error: str | None = None
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)  # group -> metric -> value
    curve: dict[int, float] = field(default_factory=dict)  # recall@k
    seconds: float = 0.0
    latency_ms: dict[str, float] = field(default_factory=dict)
    diagnostics: dict[str, Any] = field(default_factory=dict)


@dataclass
class DatasetResult:
    name: str
    kind: str
    documents: int
    queries: int
    tenants: int
    depth: int
    notes: list[str]
    config: dict[str, Any]
    timings: dict[str, float]
    configurations: list[ConfigurationResult]

    def result(self, name: str) -> ConfigurationResult | None:
        return next((c for c in self.configurations if c.name == name), None)


@dataclass
class EvalReport:
    started: str
    settings: dict[str, Any]
    datasets: list[DatasetResult]
    seconds: float = 0.0
    paths: dict[str, str] = field(default_factory=dict)

    def dataset(self, name: str) -> DatasetResult | None:
        return next((d for d in self.datasets if d.name == name), None)

    @property
    def markdown(self) -> str:
        from .report import render_markdown

        return render_markdown(self)
