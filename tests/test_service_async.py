"""AsyncMemorySystem: the sync code path on a bounded thread pool. Same results, errors and diagnostics;
the event loop's thread never runs the library; at most max_concurrency calls at once; a call cancelled
before it starts never runs. Deterministic: threads meet on events, nothing waits for time to pass."""

from __future__ import annotations

import asyncio
import dataclasses
import threading

import pytest

from memoria_pg import AsyncMemorySystem, HashEmbedder, InputError, MemorySystem, PoolTimeout

MEMORIES = [
    {"content": "Maya's favourite colour is teal.", "tenant": "t", "memory_type": "preference"},
    {"content": "Jonas lives in Porto.", "tenant": "t", "memory_type": "fact"},
    {"content": "Jonas plays the cello on Sundays.", "tenant": "t"},
]


def test_same_results_and_diagnostics_as_the_sync_api(system: MemorySystem):
    system.store_many(MEMORIES)
    sync = system.query("where does Jonas live?", tenant="t", ranking=False)

    async def run():
        async with AsyncMemorySystem(system, owns_system=False) as memory:
            return await memory.query("where does Jonas live?", tenant="t", ranking=False)

    result = asyncio.run(run())
    assert [(m.memory_id, m.retrieval_score, m.sources) for m in result.memories] == [
        (m.memory_id, m.retrieval_score, m.sources) for m in sync.memories
    ]
    assert result.route == sync.route
    timings = {k for k in sync.diagnostics.as_dict() if k.endswith("_ms")}
    strip = lambda d: {k: v for k, v in d.as_dict().items() if k not in timings}  # noqa: E731
    assert strip(result.diagnostics) == strip(sync.diagnostics)


def test_a_ranked_querys_access_write_is_settled(system: MemorySystem):
    """A ranked query's access-statistics write ends after it returns; settle waits for it."""
    system.store_many(MEMORIES)

    async def run():
        async with AsyncMemorySystem(system, owns_system=False) as memory:
            ranked = await memory.query("where does Jonas live?", tenant="t", ranking=True)
            return ranked, await memory.settle(5)

    ranked, settled = asyncio.run(run())
    assert settled and ranked.memories
    with system.db.transaction("t") as conn:
        counted = conn.execute("SELECT memory_id FROM memoria.memory_access").fetchall()
    assert {r[0] if isinstance(r, tuple) else r["memory_id"] for r in counted} == {m.memory_id for m in ranked.memories}


def test_store_query_and_errors_through_open(config):
    async def run():
        async with await AsyncMemorySystem.open(config, embedder=HashEmbedder()) as memory:
            first = await memory.store("Ada writes compilers.", tenant="u")
            again = await memory.store("Ada writes compilers.", tenant="u")
            many = await memory.store_many([{"content": "Ada lives in Lyon.", "tenant": "u"}])
            found = await memory.query("what does Ada write?", tenant="u", top_k=1)
            with pytest.raises(InputError, match="top_k"):
                await memory.query("x", tenant="u", top_k=0)
            got = await memory.get(first, tenant="u")
            return first, again, many, found, got

    first, again, many, found, got = asyncio.run(run())
    assert first and again is None and many.inserted == 1
    assert found.memories[0].memory_id == first and got.content == "Ada writes compilers."


def test_the_library_runs_off_the_event_loop(system: MemorySystem):
    seen: list[str] = []
    original = system.query

    def query(*args, **kwargs):
        seen.append(threading.current_thread().name)
        return original(*args, **kwargs)

    system.query = query  # type: ignore[method-assign]

    async def run():
        loop_thread = threading.current_thread().name
        async with AsyncMemorySystem(system, owns_system=False) as memory:
            await memory.query("anything", tenant="t")
            await memory.run(lambda s: seen.append(threading.current_thread().name))
        return loop_thread

    loop_thread = asyncio.run(run())
    assert len(seen) == 2 and all(name.startswith("memoria-async") and name != loop_thread for name in seen)


def test_at_most_max_concurrency_calls_run_at_once(system: MemorySystem):
    running, peak = 0, 0
    lock, two_running, release = threading.Lock(), threading.Event(), threading.Event()

    def block(_system):
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
            if running == 2:
                two_running.set()
        assert release.wait(30)
        with lock:
            running -= 1

    async def run():
        async with AsyncMemorySystem(system, max_concurrency=2, owns_system=False) as memory:
            calls = [asyncio.create_task(memory.run(block)) for _ in range(6)]
            assert await asyncio.to_thread(two_running.wait, 30)
            ticks = [await asyncio.sleep(0, result=i) for i in range(3)]  # the loop stays free meanwhile
            with lock:
                at_once = running
            release.set()
            await asyncio.gather(*calls)
            return at_once, ticks

    at_once, ticks = asyncio.run(run())
    assert at_once == 2 and peak == 2 and ticks == [0, 1, 2]


def test_a_call_cancelled_before_it_starts_never_runs(system: MemorySystem):
    started, release, ran = threading.Event(), threading.Event(), []

    def first(_system):
        started.set()
        assert release.wait(30)

    async def run():
        async with AsyncMemorySystem(system, max_concurrency=1, owns_system=False) as memory:
            busy = asyncio.create_task(memory.run(first))
            assert await asyncio.to_thread(started.wait, 30)
            queued = asyncio.create_task(memory.run(lambda s: ran.append(True)))
            await asyncio.sleep(0)  # it is waiting for the pool's one thread
            queued.cancel()
            with pytest.raises(asyncio.CancelledError):
                await queued  # cancelled, and so is its place in the pool's queue
            release.set()
            await busy

    asyncio.run(run())
    assert ran == []


def test_a_call_waits_for_a_thread_at_most_the_pool_timeout(config):
    """Every thread held by a call that waits inside PostgreSQL: the next call gets PoolTimeout after
    the pool timeout instead of queueing for as long; once the thread is free, calls run again."""
    started, release = threading.Event(), threading.Event()

    def hold(_system):
        started.set()
        assert release.wait(30)

    async def run():
        quick = dataclasses.replace(config, pool_timeout=0.3)
        async with await AsyncMemorySystem.open(quick, embedder=HashEmbedder(), max_concurrency=1) as memory:
            held = asyncio.create_task(memory.run(hold))
            assert await asyncio.to_thread(started.wait, 30)
            with pytest.raises(PoolTimeout, match="busy: all 1 of this process's database slots"):
                await memory.query("x", tenant="t")
            release.set()
            await held
            return await memory.store("Ada writes compilers.", tenant="t")

    assert asyncio.run(run()) is not None


def test_as_of_and_include_invalid_reach_the_query(system: MemorySystem):
    """An invalidated memory is out of a plain async query, and back with include_invalid or as of a
    time before it was invalidated (the sync API's options, named)."""
    ids = system.store_many(MEMORIES).ids
    jonas = ids[1]
    before = system.get(jonas, tenant="t").created_at
    system.invalidate(jonas, tenant="t")

    async def run():
        async with AsyncMemorySystem(system, owns_system=False) as memory:
            ask = lambda **kw: memory.query("where does Jonas live?", tenant="t", ranking=False, **kw)  # noqa: E731
            return await ask(), await ask(include_invalid=True), await ask(as_of=before)

    plain, with_invalid, earlier = asyncio.run(run())
    assert jonas not in [m.memory_id for m in plain.memories]
    assert jonas in [m.memory_id for m in with_invalid.memories]
    assert jonas in [m.memory_id for m in earlier.memories]
