"""run_eval: load each data set, embed (cached), score the references, store it in a fresh
database, run every query configuration through MemorySystem.query, and score the runs."""

from __future__ import annotations

import contextlib
import datetime as dt
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memoria_pg import Config, InputError, MemoryRecord, MemorySystem, embed_memories, normalize
from memoria_pg.query.workers.registry import DEFAULT_WORKERS, NO_SHIFT

from . import beir, locomo, longmemeval
from .cache import EmbeddingCache, default_cache_dir, model_label
from .configurations import (
    CROSS_ENCODER,
    SQL_CONFIGURATIONS,
    Configuration,
    check_names,
    configuration,
    describe,
)
from .data import Dataset, default_data_root, select
from .databases import admin_server, fresh_database, server_version
from .metrics import recall_curve, score
from .reference import REFERENCES, reference_runs
from .results import ConfigurationResult, DatasetResult, EvalReport

DATASETS = ("locomo", "scifact", "hotpotqa", "longmemeval", "msmarco")
# How many memories each query returns: the deepest metric (BEIR recall@100), and for LongMemEval
# enough turns to rank 10 distinct sessions.
DEPTH = {"locomo": 50, "scifact": 100, "hotpotqa": 100, "longmemeval": 100, "msmarco": 100}
# Loaders take the data folder and how many turns before and after a conversation turn it is
# stored with as its context (LoCoMo, LongMemEval; None: the loader's default; BEIR documents have
# none).
LOADERS: dict[str, Callable[[Path, int | None], Dataset]] = {
    "locomo": lambda root, n: locomo.load(root, context_turns=locomo.CONTEXT_TURNS if n is None else n),
    "scifact": lambda root, _: beir.load(root, "scifact"),
    "hotpotqa": lambda root, _: beir.load(root, "hotpotqa"),
    "msmarco": lambda root, _: beir.load(root, "msmarco"),
    "longmemeval": lambda root, n: longmemeval.load(root, context_turns=longmemeval.CONTEXT_TURNS if n is None else n),
}
Log = Callable[[str], None]


class Unavailable(Exception):
    """A configuration cannot run here (its module is missing, or the feature did not apply)."""


def run_eval(
    data: str | Path | None = None,
    datasets: Iterable[str] = DATASETS,
    *,
    limit_queries: int | None = None,
    max_tenants: int | None = None,
    corpus_limit: int | None = None,
    configurations: Iterable[str] | None = None,
    cross_encoder: str | None = None,
    dsn: str | None = None,
    settings: Mapping[str, Any] | None = None,
    use_age: bool = False,
    cache_dir: str | Path | None = None,
    out: str | Path | None = None,
    keep_databases: bool = False,
    context_turns: int | None = None,
    log: Log | None = None,
) -> EvalReport:
    """Evaluate retrieval quality; writes results/<timestamp>/ under `out` when given.

    `dsn` is an admin DSN allowed to CREATE DATABASE (a fresh database per data set, dropped
    afterwards); without one, an embedded server runs in a temporary directory. `settings` are
    Config overrides applied to every data set (MEMORIA_* variables are not read).
    `context_turns`: conversation turns (LoCoMo, LongMemEval) are stored with that many turns before
    and after them as context (0: none; None: 2 for LoCoMo's short turns, 1 for LongMemEval's long ones).
    """
    log = log or _stderr
    root = Path(data) if data is not None else default_data_root()
    names = list(dict.fromkeys(datasets))
    unknown = sorted(set(names) - set(DATASETS))
    if unknown:
        raise InputError(f"unknown datasets {unknown}; choose from {list(DATASETS)}")
    chosen = check_names(
        tuple(configurations) if configurations else tuple(c.name for c in SQL_CONFIGURATIONS) + REFERENCES
    )
    settings = dict(settings or {})
    dim = Config(**settings).embedding_dim  # and fail early on a bad setting
    cache_root = Path(cache_dir) if cache_dir else default_cache_dir()
    started = dt.datetime.now()
    t_start = time.perf_counter()
    if context_turns is not None and context_turns < 0:
        raise InputError(f"context_turns must be 0 or more, got {context_turns}")
    loaded = [(name, _load(root, name, limit_queries, max_tenants, corpus_limit, context_turns)) for name in names]
    report = EvalReport(
        started=started.isoformat(timespec="seconds"),
        datasets=[],
        settings={
            "data": str(root),
            "datasets": names,
            "configurations": list(chosen),
            "limit_queries": limit_queries,
            "max_tenants": max_tenants,
            "corpus_limit": corpus_limit,
            "cross_encoder": cross_encoder,
            "config_overrides": settings,
            "use_age": use_age,
            "model": model_label(settings.get("embedding_model")),
            "cache_dir": str(cache_root),
            "code": _code_version(),
            "embedded_server": dsn is None,
            "context_turns": context_turns
            if context_turns is not None
            else {"locomo": locomo.CONTEXT_TURNS, "longmemeval": longmemeval.CONTEXT_TURNS},
        },
    )
    with admin_server(dsn, log) as admin:
        report.settings["server"] = server_version(admin)
        for name, dataset in loaded:
            log(f"== {name}: {len(dataset.documents)} documents, {len(dataset.queries)} queries")
            cache = EmbeddingCache(
                cache_root / f"{name}-{model_label(settings.get('embedding_model'))}.npz",
                model_path=settings.get("embedding_model"),
                dim=dim,
                log=log,
            )
            report.datasets.append(
                evaluate_dataset(
                    dataset,
                    admin_dsn=admin,
                    names=chosen,
                    cache=cache,
                    settings=settings,
                    use_age=use_age,
                    cross_encoder=cross_encoder,
                    keep_database=keep_databases,
                    log=log,
                )
            )
    report.seconds = time.perf_counter() - t_start
    if out is not None:
        from .report import write_report

        report.paths = write_report(report, Path(out), started)
    return report


def _load(root: Path, name: str, limit_queries, max_tenants, corpus_limit, context_turns: int | None) -> Dataset:
    t0 = time.perf_counter()
    dataset = select(
        LOADERS[name](root, context_turns),
        limit_queries=limit_queries,
        max_tenants=max_tenants,
        corpus_limit=corpus_limit,
    )
    dataset.notes.append(f"loaded in {time.perf_counter() - t0:.1f} s")
    return dataset


def evaluate_dataset(
    dataset: Dataset,
    *,
    admin_dsn: str,
    names: Sequence[str],
    cache: EmbeddingCache,
    settings: Mapping[str, Any],
    use_age: bool = False,
    cross_encoder: str | None = None,
    keep_database: bool = False,
    log: Log = print,
) -> DatasetResult:
    depth = DEPTH.get(dataset.name, 100)
    base = Config(**{"top_k": depth, "worker_limit": max(Config.worker_limit, depth), "use_age": use_age, **settings})
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    doc_vectors, query_vectors = embed(dataset, cache)
    timings["embed_s"] = time.perf_counter() - t0
    results = _references(
        dataset, [n for n in names if n in REFERENCES], doc_vectors, query_vectors, base, depth, timings, log
    )
    sql_names = [n for n in names if n not in REFERENCES]
    if sql_names:
        with fresh_database(admin_dsn, dataset.name, keep_database, log) as dsn:
            results += _sql_configurations(
                dataset,
                sql_names,
                base.replace(dsn=dsn),
                cache,
                doc_vectors,
                query_vectors,
                depth,
                cross_encoder,
                timings,
                log,
            )
    order = {n: i for i, n in enumerate(names)}
    results.sort(key=lambda r: order.get(r.name, len(order)))
    shown = {k: v for k, v in base.as_dict().items() if k not in ("dsn", "data_dir")}
    return DatasetResult(
        name=dataset.name,
        kind=dataset.kind,
        documents=len(dataset.documents),
        queries=len(dataset.queries),
        tenants=len(dataset.tenants),
        depth=depth,
        notes=dataset.notes,
        config=shown,
        timings=timings,
        configurations=results,
    )


def embed(dataset: Dataset, cache: EmbeddingCache):
    """({(tenant, doc_id): vector}, {query_id: vector}): documents as the library embeds memories
    (memoria_pg.embed_memories: content, plus context when there is one), queries normalized."""
    before = cache.embedded
    doc_matrix = embed_memories(cache, [d.content for d in dataset.documents], [d.context for d in dataset.documents])
    query_matrix = cache.embed([normalize(q.text) for q in dataset.queries])
    dataset.notes.append(f"embeddings: {cache.embedded - before} texts embedded, the rest read from {cache.path}")
    return (
        {(d.tenant, d.doc_id): v for d, v in zip(dataset.documents, doc_matrix, strict=True)},
        {q.query_id: v for q, v in zip(dataset.queries, query_matrix, strict=True)},
    )


def _references(dataset, names, doc_vectors, query_vectors, base: Config, depth: int, timings, log: Log):
    if not names:
        return []
    t0 = time.perf_counter()
    runs = reference_runs(dataset, doc_vectors, query_vectors, names=names, depth=depth, k1=base.bm25_k1, b=base.bm25_b)
    timings["references_s"] = time.perf_counter() - t0
    log(f"   references {', '.join(names)}: {timings['references_s']:.1f} s")
    return [_scored(ConfigurationResult(n, describe(n)), dataset, runs[n], depth) for n in names]


def _sql_configurations(
    dataset,
    names,
    config: Config,
    cache,
    doc_vectors,
    query_vectors,
    depth: int,
    cross_encoder: str | None,
    timings,
    log: Log,
) -> list[ConfigurationResult]:
    results = []
    ranking_error = None
    with contextlib.ExitStack() as stack:
        try:
            system = stack.enter_context(_system(config, cache, None, migrate=True))
        except ImportError as exc:
            # MemorySystem builds the ranking pipeline: when that import fails, the system runs without
            # it and the ranked configurations are reported unavailable instead of stopping the run.
            ranking_error = f"{type(exc).__name__}: {exc}"
            system = stack.enter_context(_system(config, cache, ranking_error, migrate=True))
        t0 = time.perf_counter()
        ingest(system, dataset, doc_vectors, log)
        timings["ingest_s"] = time.perf_counter() - t0
        for name in names:
            conf = configuration(name)
            result = ConfigurationResult(name, conf.description)
            if name == CROSS_ENCODER and not cross_encoder:
                result.status, result.error = "skipped", "no cross-encoder model path given (--cross-encoder)"
            elif conf.ranking and ranking_error:
                result.status, result.error = "unavailable", f"ranking pipeline import failed: {ranking_error}"
            else:
                result = _run_sql(
                    system, config, conf, cache, ranking_error, cross_encoder, dataset, query_vectors, depth, log
                )
            timings[f"{name}_s"] = result.seconds
            results.append(result)
    return results


def ingest(system, dataset: Dataset, doc_vectors: Mapping[tuple[str, str], np.ndarray], log: Log) -> None:
    """Store every document with its cached vector; doc_id goes into metadata and external_id."""
    records = (
        MemoryRecord(
            content=d.content,
            tenant=d.tenant,
            metadata={**d.metadata, "doc_id": d.doc_id},
            created_at=d.created_at,
            external_id=d.doc_id,
            context=d.context,
            embedding=doc_vectors[(d.tenant, d.doc_id)],
        )
        for d in dataset.documents
    )
    t0 = time.perf_counter()
    # One writer: the memories get their ids in the same order at every run (batch by batch in input
    # order, and within a batch in the order of their keys, sql/ingest/insert_memories), and ids break
    # exact ties (the vector search's among equal distances, the final CTE's among equal scores). With
    # two, the ids follow how
    # the writers' batches interleaved, and a main metric moved by up to 0.0007 from run to run; with
    # one, two runs agreed on every figure but MS MARCO's BM25 and RRF (0.0001, 0.0004). About 20%
    # more time for the whole evaluation (LongMemEval's 20,114 turns: 98 -> 145 s).
    result = system.store_many(records, writers=1)
    log(f"   stored {result.inserted} memories ({result.duplicates} duplicates) in {time.perf_counter() - t0:.1f} s")
    # as `memoria-pg ingest` (and the server) do: a tenant above the exact bound gets its own HNSW
    # index, the only one its vector search can use (no shared index since migration 0016)
    built = [a for a in system.sync_vector_indexes() if a.action == "build"]
    if built:
        log(f"   built {len(built)} per-tenant vector indexes")


def _run_sql(
    system,
    config: Config,
    conf: Configuration,
    cache,
    ranking_error,
    cross_encoder,
    dataset: Dataset,
    query_vectors,
    depth: int,
    log: Log,
) -> ConfigurationResult:
    result = ConfigurationResult(conf.name, conf.description)
    overrides = dict(conf.overrides)
    if conf.name == CROSS_ENCODER:
        overrides["cross_encoder_model"] = cross_encoder
    t0 = time.perf_counter()
    try:
        with contextlib.ExitStack() as stack:
            target = system
            if overrides or conf.static_weights:
                registry = DEFAULT_WORKERS.with_shift(NO_SHIFT) if conf.static_weights else None
                target = stack.enter_context(
                    _system(config.replace(**overrides), cache, ranking_error, migrate=False, registry=registry)
                )
            if overrides.get("vector_exact_max_rows") == 0:
                # HNSW forced: every (tenant, type) gets the HNSW index of its own the search needs
                target.sync_vector_indexes()
            reset_access_counts(target, dataset.tenants)
            run, stats = run_queries(target, conf, dataset, query_vectors, depth)
    except Unavailable as exc:
        result.status, result.error = "unavailable", str(exc)
        log(f"   {conf.name}: unavailable ({exc})")
        return result
    result.seconds = time.perf_counter() - t0
    result.latency_ms, result.diagnostics = stats.pop("latency_ms"), stats
    if stats["errors"] == len(dataset.queries):
        result.status, result.error = "failed", stats.get("first_error")
    _scored(result, dataset, run, depth)
    log(f"   {conf.name}: {result.seconds:.1f} s, {_main(dataset, result)}")
    return result


def run_queries(system, conf: Configuration, dataset: Dataset, query_vectors, depth: int):
    """({query id: ranked doc ids}, diagnostics summary); Unavailable when the first query fails
    or the configuration's feature (ranking, cross-encoder) did not apply."""
    run: dict[str, list[str]] = {}
    tally = _Tally()
    for i, q in enumerate(dataset.queries):
        try:
            when = {"reference_time": q.reference_time} if q.reference_time is not None else {}
            response = system.query(
                q.text, tenant=q.tenant, top_k=depth, embedding=query_vectors[q.query_id], **when, **conf.query_kwargs()
            )
        except Exception as exc:  # an evaluation reports a failing configuration instead of stopping
            if i == 0:
                raise Unavailable(f"{type(exc).__name__}: {exc}") from exc
            tally.error(exc)
            run[q.query_id] = []
            continue
        if i == 0:
            _check_applied(conf, response.diagnostics)
        run[q.query_id] = [m.metadata.get("doc_id") for m in response.memories]
        tally.add(response.diagnostics)
    return run, tally.summary()


def _check_applied(conf: Configuration, d) -> None:
    if conf.ranking and d.ranking_skipped:
        raise Unavailable("the ranking pipeline did not run (ranking_skipped)")
    if conf.overrides.get("enable_cross_encoder") and not d.cross_encoder_applied:
        raise Unavailable("the cross-encoder was not applied")


class _Tally:
    """Per-query diagnostics summed over one configuration's queries."""

    def __init__(self) -> None:
        self.ms: dict[str, list[float]] = {"total": [], "retrieval": [], "database": [], "ranking": []}
        self.counters = {
            k: Counter()
            for k in (
                "finish_reasons",
                "routes",
                "submitted_sources",
                "failed_sources",
                "pending_sources",
                "worker_errors",
            )
        }
        self.candidates: list[int] = []
        self.errors, self.first_error = 0, None

    def add(self, d) -> None:
        for key in self.ms:
            self.ms[key].append(getattr(d, f"{key}_ms"))
        self.candidates.append(d.candidate_count)
        self.counters["finish_reasons"][d.retrieval_finish_reason or "-"] += 1
        self.counters["routes"][d.route or "v3"] += 1
        self.counters["submitted_sources"].update(d.submitted_sources)
        self.counters["failed_sources"].update(d.failed_sources)
        self.counters["pending_sources"].update(d.pending_sources)
        self.counters["worker_errors"].update(d.worker_errors.values())

    def error(self, exc: Exception) -> None:
        self.errors += 1
        self.first_error = self.first_error or f"{type(exc).__name__}: {exc}"

    def summary(self) -> dict[str, Any]:
        latency = _latency(self.ms["total"]) | {f"{k}_mean": _mean(v) for k, v in self.ms.items() if k != "total"}
        counters = {k: dict(c.most_common(3) if k == "worker_errors" else c) for k, c in self.counters.items()}
        return {
            "latency_ms": latency,
            "errors": self.errors,
            "first_error": self.first_error,
            "mean_candidates": _mean(self.candidates),
            **counters,
        }


def reset_access_counts(system, tenants: Iterable[str]) -> None:
    """Ranked queries record accesses, which the ranking's access signal reads: every
    configuration starts from the same state."""
    for tenant in tenants:
        system.clear_access_statistics(tenant)


def _scored(
    result: ConfigurationResult, dataset: Dataset, run: Mapping[str, Sequence[str]], depth: int
) -> ConfigurationResult:
    result.metrics = score(dataset, run)
    result.curve = recall_curve(dataset, run, depth)
    return result


def _main(dataset: Dataset, result: ConfigurationResult) -> str:
    from .metrics import MAIN_METRIC

    group, metric = MAIN_METRIC[dataset.kind]
    value = result.metrics.get(group, {}).get(metric)
    return f"{metric} {value:.4f}" if value is not None else "-"


def _latency(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    return {
        "mean": statistics.fmean(values),
        "p50": ordered[len(ordered) // 2],
        "p95": ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))],
    }


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else 0.0


@contextlib.contextmanager
def _system(
    config: Config, cache: EmbeddingCache, ranking_error: str | None, *, migrate: bool, registry: Any = None
) -> Iterator[Any]:
    kwargs: dict[str, Any] = {"embedder": cache, "auto_migrate": migrate, "worker_registry": registry}
    if ranking_error:
        kwargs["ranking"] = False  # no pipeline: MemorySystem would fail importing it
    system = MemorySystem(config, **kwargs)
    try:
        yield system
    finally:
        system.close()


def _code_version() -> str | None:
    root = Path(__file__).resolve().parent  # the checkout holding the harness (and the library beside it)
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}{' (uncommitted changes)' if dirty else ''}"


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
