"""A real `memoria-pg serve` (uvicorn) in a subprocess on 127.0.0.1, for the service tests.

The server under test embeds with HashEmbedder (MEMORIA_EMBEDDING_MODEL=hash: deterministic, no model).
Starting waits for /v1/health to answer (or the process to exit, which fails with its log).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx

from memoria_pg.service import keys


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    def __init__(self, dsn: str | None, *args: str, env: dict[str, str] | None = None) -> None:
        self.dsn = dsn
        self.args = args
        self.env = {**os.environ, "MEMORIA_EMBEDDING_MODEL": "hash", "MEMORIA_POOL_MIN_SIZE": "1", **(env or {})}
        if dsn:
            self.env.pop("MEMORIA_DATA_DIR", None)
        self.env.pop("MEMORIA_DSN", None)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = tempfile.NamedTemporaryFile(prefix="memoria-serve-", suffix=".log", delete=False)  # noqa: SIM115
        self.process: subprocess.Popen[bytes] | None = None
        self._final_log: str | None = None

    def command(self) -> list[str]:
        root = ["--dsn", self.dsn] if self.dsn else []  # no DSN: the embedded server (MEMORIA_DATA_DIR in env)
        return [sys.executable, "-m", "memoria_pg.cli", *root, "serve", "--port", str(self.port), *self.args]

    def start(self, timeout: float = 90.0) -> LiveServer:
        self.process = subprocess.Popen(self.command(), env=self.env, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited with {self.process.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/v1/health", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"the server did not answer within {timeout} s:\n{self.log()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def log(self) -> str:
        if self._final_log is not None:
            return self._final_log
        self._log.flush()
        return Path(self._log.name).read_text(errors="replace")

    def discard_log(self) -> None:
        self._final_log = self.log()
        self._log.close()
        Path(self._log.name).unlink(missing_ok=True)

    def client(self, token: str | None = None, **headers: str) -> httpx.Client:
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return httpx.Client(base_url=self.url, headers=headers, timeout=60)


@contextmanager
def live_server(dsn: str | None, *args: str, env: dict[str, str] | None = None) -> Iterator[LiveServer]:
    server = LiveServer(dsn, *args, env=env).start()
    try:
        yield server
    finally:
        server.stop()
        server.discard_log()


def new_key(dsn: str, tenant: str | None = None, *, admin: bool = False) -> str:
    return keys.create_key(dsn, tenant=tenant, admin=admin)[1]


def run_cli(
    dsn: str, *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "MEMORIA_EMBEDDING_MODEL": "hash", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "memoria_pg.cli", "--dsn", dsn, *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def records(*contents: str, **fields: object) -> Sequence[dict[str, object]]:
    return [{"content": c, **fields} for c in contents]
