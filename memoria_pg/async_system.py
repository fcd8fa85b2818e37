"""AsyncMemorySystem: the library for asyncio applications, on the one MemorySystem code path.

Each call runs the synchronous MemorySystem method on a bounded thread pool of its own, so the event
loop never waits for PostgreSQL, the connection pool or the model. There is no second pipeline: the
same code runs, so results, errors and diagnostics are the sync ones. Why threads and not psycopg's
async pool: a query already runs its workers concurrently on the scheduler's threads, each on its own
pooled connection; an async copy of the pipeline would have to keep the two in step forever, for a
hop to a thread that costs tens of microseconds against milliseconds of SQL (the benchmark is
benchmarks/async_api.py; figures in the README's server section).

The pool has `max_concurrency` threads (default: the connection pool's size, `pool_max_size`): more
concurrent calls than that wait in the event loop, not for a connection inside PostgreSQL's pool
(where they would count against `pool_timeout`), and for at most `pool_timeout` too: then PoolTimeout
("busy"). Unbounded, every call of every tenant would queue behind calls that hold all the threads
while they wait inside PostgreSQL (on a lock, say) for as long as those take. A thread's slot is given
back when its call is done, not when its caller stops waiting, so calls never outnumber threads. A
call the caller cancels before it starts never runs; one already running finishes in its thread (a
statement cannot be abandoned half-way), and its result is dropped.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from .config import Config
from .core.types import ForgetResult, HistoryEvent, Memory, MemoryRecord, StoreResult
from .db import vector_indexes
from .db.database import CLOSED
from .errors import PoolTimeout, ServerError
from .query import QueryResponse
from .system import MemorySystem

T = TypeVar("T")


class AsyncMemorySystem:
    """The MemorySystem API as coroutines. Build one with `await AsyncMemorySystem.open(config, ...)`
    (which starts the embedded server or opens the pool in a thread), or wrap a MemorySystem you have:
    `AsyncMemorySystem(system)` (then closing it closes the system too unless `owns_system=False`)."""

    def __init__(self, system: MemorySystem, *, max_concurrency: int | None = None, owns_system: bool = True) -> None:
        self.system = system
        self.max_concurrency = max(1, max_concurrency or system.config.pool_max_size)
        self._owns_system = owns_system
        self._executor = concurrent.futures.ThreadPoolExecutor(self.max_concurrency, thread_name_prefix="memoria-async")
        self._slots = asyncio.Semaphore(self.max_concurrency)  # one per thread: a call waits here, not in the executor

    @classmethod
    async def open(
        cls, config: Config | None = None, *, max_concurrency: int | None = None, **options: Any
    ) -> AsyncMemorySystem:
        """`MemorySystem(config, **options)` built in a thread (it may start a server, migrate, connect)."""
        system = await asyncio.to_thread(MemorySystem, config, **options)
        return cls(system, max_concurrency=max_concurrency)

    @property
    def config(self) -> Config:
        return self.system.config

    @property
    def memory_types(self) -> tuple[str, ...]:
        return self.system.memory_types

    async def run(self, fn: Callable[[MemorySystem], T]) -> T:
        """`fn(system)` on the pool: for anything of the sync API that has no coroutine here. Waits at
        most `config.pool_timeout` for a free thread, then PoolTimeout."""
        loop = asyncio.get_running_loop()
        wait = self.system.config.pool_timeout
        try:
            await asyncio.wait_for(self._slots.acquire(), wait)
        except TimeoutError:
            raise PoolTimeout(
                f"busy: all {self.max_concurrency} of this process's database slots stayed in use for {wait:g} s "
                "(MEMORIA_POOL_TIMEOUT); retry, or raise MEMORIA_POOL_MAX_SIZE if this is the usual load"
            ) from None
        call = functools.partial(contextvars.copy_context().run, fn, self.system)
        try:
            future = self._executor.submit(call)
        except RuntimeError:  # the executor was shut down: close() was called
            self._slots.release()
            raise ServerError(CLOSED) from None
        except BaseException:
            self._slots.release()
            raise
        future.add_done_callback(lambda _: _call_soon(loop, self._slots.release))
        return await asyncio.wrap_future(future, loop=loop)

    # -- ingestion -------------------------------------------------------------------------------
    async def store(self, content: str, **fields: Any) -> int | None:
        """MemorySystem.store: the new memory's id, or None when it was stored already."""
        return await self.run(lambda s: s.store(content, **fields))

    async def store_many(self, records: Iterable[MemoryRecord | Mapping[str, Any]], **options: Any) -> StoreResult:
        """MemorySystem.store_many; `records` is read in the pool's thread, and so is `progress` called."""
        return await self.run(lambda s: s.store_many(records, **options))

    # -- the lifecycle (the same arguments as MemorySystem's methods) -----------------------------
    async def get(self, memory_id: int | None = None, **options: Any) -> Memory:
        return await self.run(lambda s: s.get(memory_id, **options))

    async def list_memories(self, **options: Any) -> list[Memory]:
        return await self.run(lambda s: s.list_memories(**options))

    async def update(self, memory_id: int, **changes: Any) -> Memory:
        return await self.run(lambda s: s.update(memory_id, **changes))

    async def delete(self, memory_ids: int | Iterable[int], **options: Any) -> int:
        return await self.run(lambda s: s.delete(memory_ids, **options))

    async def forget(self, **options: Any) -> ForgetResult:
        return await self.run(lambda s: s.forget(**options))

    async def history(self, memory_id: int, **options: Any) -> list[HistoryEvent]:
        return await self.run(lambda s: s.history(memory_id, **options))

    async def invalidate(self, memory_id: int, **options: Any) -> Memory:
        return await self.run(lambda s: s.invalidate(memory_id, **options))

    async def restore(self, memory_id: int, **options: Any) -> Memory:
        return await self.run(lambda s: s.restore(memory_id, **options))

    async def erase_tenant(self, tenant: str) -> dict[str, int]:
        return await self.run(lambda s: s.erase_tenant(tenant))

    # -- queries ---------------------------------------------------------------------------------
    async def query(
        self,
        text: str,
        *,
        tenant: str | None = None,
        memory_type: str | None = None,
        top_k: int | None = None,
        embedding: Sequence[float] | np.ndarray | None = None,
        workers: Sequence[str] | None = None,
        ranking: bool | None = None,
        v4: bool | None = None,
        trace: bool | None = None,
        as_of: Any = None,
        include_invalid: bool = False,
        candidates: bool = True,
        reference_time: Any = None,
        **options: Any,
    ) -> QueryResponse:
        """MemorySystem.query (same options and diagnostics: `as_of` answers as of that time,
        `include_invalid` keeps invalidated memories, `candidates=False` returns no candidate list beyond
        the memories; `options` passes newer ones through)."""
        return await self.run(
            lambda s: s.query(
                text,
                tenant=tenant,
                memory_type=memory_type,
                top_k=top_k,
                embedding=embedding,
                workers=workers,
                ranking=ranking,
                v4=v4,
                trace=trace,
                as_of=as_of,
                include_invalid=include_invalid,
                candidates=candidates,
                reference_time=reference_time,
                **options,
            )
        )

    async def explain(self, response: QueryResponse) -> str:
        return await self.run(lambda s: s.explain(response))

    async def settle(self, timeout: float | None = None) -> bool:
        """MemorySystem.settle, in a thread of its own (it waits, holding no connection)."""
        return await asyncio.to_thread(lambda: self.system.settle(timeout))

    # -- administration --------------------------------------------------------------------------
    async def add_memory_type(self, name: str) -> bool:
        return await self.run(lambda s: s.add_memory_type(name))

    async def refresh_memory_types(self) -> tuple[str, ...]:
        return await self.run(lambda s: s.refresh_memory_types())

    async def sync_vector_indexes(
        self, tenants: Sequence[str] | None = None, *, dry_run: bool = False
    ) -> list[vector_indexes.Action]:
        """MemorySystem.sync_vector_indexes, in a thread of its own: an index build takes seconds to
        minutes and holds none of the pool's connections nor a slot of max_concurrency."""
        return await asyncio.to_thread(lambda: self.system.sync_vector_indexes(tenants, dry_run=dry_run))

    async def clear_access_statistics(self, tenant: str) -> int:
        return await self.run(lambda s: s.clear_access_statistics(tenant))

    async def readiness(self) -> dict[str, Any]:
        """MemorySystem.readiness, in a thread of its own: a busy pool does not delay the probe."""
        return await asyncio.to_thread(self.system.readiness)

    async def load_model(self) -> None:
        """Load the embedding model now (in a thread of its own) instead of on the first query."""
        await asyncio.to_thread(lambda: self.system.embedder)

    # -- lifecycle -------------------------------------------------------------------------------
    async def close(self) -> None:
        """Wait for the calls in flight, then close the MemorySystem (when this object owns it)."""
        await asyncio.to_thread(self._executor.shutdown, True)
        if self._owns_system:
            await asyncio.to_thread(self.system.close)

    async def __aenter__(self) -> AsyncMemorySystem:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[[], Any]) -> None:
    """`callback` on `loop`, from the call's thread; nothing when the loop is closed (no one waits)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback)
