"""Measuring helpers: elapsed time, process memory, the machine's load, progress lines on stderr."""

from __future__ import annotations

import contextlib
import os
import resource
import sys
import threading
import time
from typing import Any

import numpy as np


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def ms_since(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000


class LoadMonitor:
    """Samples the machine's 1-minute load average (other work on a shared machine skews timings)."""

    def __init__(self, interval_s: float = 2.0) -> None:
        self.samples: list[tuple[float, float]] = []
        self.phases: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval_s,), daemon=True)
        self._thread.start()

    def _run(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            self.samples.append((time.time(), os.getloadavg()[0]))

    @contextlib.contextmanager
    def phase(self, name: str):
        log(name)
        start = time.time()
        try:
            yield
        finally:
            end = time.time()
            loads = [load for t, load in self.samples if start <= t <= end] or [os.getloadavg()[0]]
            self.phases.append(
                {
                    "phase": name,
                    "seconds": end - start,
                    "load_mean": float(np.mean(loads)),
                    "load_max": float(max(loads)),
                    "cpus": os.cpu_count(),
                }
            )

    def stop(self) -> None:
        self._stop.set()


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class CpuMeter:
    """CPU time of this process and of the database's client backends, which a shared machine's load
    does not inflate the way it inflates wall time. Backends are read from /proc, so the server's CPU
    is only known when it runs on this machine (None otherwise)."""

    def __init__(self, admin_conn) -> None:
        self.conn = admin_conn  # a superuser connection to the benchmark database (sees every backend)
        self.tick = os.sysconf("SC_CLK_TCK")

    def snapshot(self) -> tuple[float, dict[int, float]]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        pids = [
            r[0]
            for r in self.conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
            ).fetchall()
        ]
        return usage.ru_utime + usage.ru_stime, {pid: self._backend_cpu(pid) for pid in pids}

    def since(self, before: tuple[float, dict[int, float]]) -> dict[str, float | None]:
        client_before, backends_before = before
        client_now, backends_now = self.snapshot()
        if any(v is None for v in backends_now.values()):
            server = None
        else:  # backends that appeared since `before` count from zero
            server = sum(v - (backends_before.get(pid) or 0.0) for pid, v in backends_now.items())
        return {"client_s": client_now - client_before, "server_s": server}

    def _backend_cpu(self, pid: int) -> float | None:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / self.tick  # utime + stime
