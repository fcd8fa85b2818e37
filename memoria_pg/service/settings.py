"""The service's own settings (the library's are in Config): where it listens and its limits."""

from __future__ import annotations

import dataclasses
import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields

from ..errors import ConfigError

ENV_PREFIX = "MEMORIA_SERVE_"


@dataclass(frozen=True)
class ServiceSettings:
    """Every field reads MEMORIA_SERVE_<FIELD> (e.g. MEMORIA_SERVE_MAX_BATCH=500); `memoria-pg serve`
    options override them."""

    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = 1  # uvicorn worker processes, each with its own MemorySystem (needs a DSN when > 1)
    # Serve without API keys on an address that is not loopback (then anyone who can reach it acts
    # for the default tenant). Without it, such a server refuses to start while no key exists.
    insecure: bool = False
    max_body_bytes: int = 8 * 1024 * 1024  # a larger request body is refused with 413
    max_batch: int = 1_000  # memories in one POST /v1/memories
    key_cache_seconds: float = 5.0  # a key checked within this many seconds is not looked up again (0: always)
    max_concurrency: int = 0  # calls on the library at once (AsyncMemorySystem threads); 0: pool_max_size
    # Every this many seconds, give each tenant grown past vector_exact_max_rows memories of a type its
    # own HNSW index (`memoria-pg db vector-indexes`, built concurrently; first run at start-up). 0: never.
    vector_index_sync_seconds: float = 3600.0
    access_log: bool = True  # uvicorn's access log: method, path and status, never headers
    log_level: str = "info"

    def __post_init__(self) -> None:
        for name in ("port", "workers", "max_body_bytes", "max_batch"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{ENV_PREFIX}{name.upper()} must be positive, got {getattr(self, name)}")
        if self.port > 65535:
            raise ConfigError(f"{ENV_PREFIX}PORT must be a TCP port (1 to 65535), got {self.port}")
        if self.key_cache_seconds < 0 or self.max_concurrency < 0 or self.vector_index_sync_seconds < 0:
            raise ConfigError("key_cache_seconds, max_concurrency and vector_index_sync_seconds must not be negative")

    @property
    def loopback(self) -> bool:
        """Whether the server listens on this machine only (127.0.0.0/8, ::1, localhost)."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host.strip("[]")).is_loopback
        except ValueError:
            return False

    @property
    def allow_anonymous(self) -> bool:
        """Whether a request without a key may act for the default tenant while no key exists."""
        return self.loopback or self.insecure

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> ServiceSettings:
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for f in fields(cls):
            raw = env.get(ENV_PREFIX + f.name.upper())
            if raw is not None:
                values[f.name] = _parse(f.name, raw, type(getattr(cls, f.name)))
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]  # each value parsed by its field's type

    def as_env(self) -> dict[str, str]:
        """The settings as MEMORIA_SERVE_* variables (what uvicorn's worker processes read)."""
        return {ENV_PREFIX + k.upper(): str(v) for k, v in dataclasses.asdict(self).items()}


def _parse(name: str, raw: str, kind: type) -> object:
    try:
        if kind is bool:
            lowered = raw.strip().lower()
            if lowered not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
                raise ValueError(raw)
            return lowered in ("1", "true", "yes", "on")
        return kind(raw)
    except ValueError:
        raise ConfigError(f"{ENV_PREFIX}{name.upper()}={raw!r} is not a valid {kind.__name__}") from None
