"""Embeddings remembered on disk by a hash of each text, so reruns and subsets embed nothing.

One file per data set and model: <cache dir>/<dataset>-<model>.npz holding `keys` (16-byte
SHA-256 prefixes of the texts, as uint8 rows) and `vectors`. The model is loaded only on a miss.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

CACHE_ENV = "MEMORIA_EVAL_CACHE"
CHUNK = 256  # texts per model call between saves: an interrupted run keeps what it embedded


def default_cache_dir() -> Path:
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "memoria-pg" / "eval"


def model_label(model_path: str | None) -> str:
    """The model's name, and the backend running it when not torch (MEMORIA_EMBEDDING_BACKEND=onnx or
    onnx-int8): each backend's vectors are cached apart."""
    name = "all-MiniLM-L6-v2" if model_path is None else Path(model_path).name
    backend = embedding_backend()
    if backend == "onnx-int8":  # the int8 graph's recipe too: another recipe's vectors are not reused
        from memoria_pg.core.embedding_onnx import INT8_RECIPE

        return f"{name}-{backend}-{INT8_RECIPE}"
    return name if backend == "torch" else f"{name}-{backend}"


def embedding_backend() -> str:
    return os.environ.get("MEMORIA_EMBEDDING_BACKEND") or "torch"


def text_key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()[:16]


class EmbeddingCache:
    """An Embedder (dim, embed) backed by a file; misses go to the sentence-transformers model."""

    def __init__(
        self,
        path: Path,
        *,
        model_path: str | None = None,
        dim: int = 384,
        batch_size: int = 64,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.path = Path(path)
        self.model_path = model_path
        self.dim = dim
        self.batch_size = batch_size
        self.log = log or (lambda message: None)
        self.embedded = 0  # texts sent to the model by this object
        self._model = None
        self._rows: dict[bytes, int] = {}
        self._vectors = np.zeros((0, dim), dtype=np.float32)
        if self.path.exists():
            with np.load(self.path) as data:
                keys, vectors = data["keys"], data["vectors"].astype(np.float32)
            if vectors.ndim == 2 and vectors.shape[1] == dim:
                self._vectors = vectors
                self._rows = {bytes(k): i for i, k in enumerate(keys)}

    def __len__(self) -> int:
        return len(self._rows)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length float32 rows, one per text, from the file or the model."""
        keys = [text_key(t) for t in texts]
        missing: dict[bytes, str] = {}
        for key, text in zip(keys, texts, strict=True):
            if key not in self._rows:
                missing[key] = text
        if missing:
            self._embed_missing(missing)
        return self._vectors[[self._rows[k] for k in keys]] if keys else np.zeros((0, self.dim), np.float32)

    def _embed_missing(self, missing: dict[bytes, str]) -> None:
        # Longest first and in chunks: similar lengths pad less, and each chunk is saved.
        items = sorted(missing.items(), key=lambda kv: -len(kv[1]))
        model = self._load_model()
        t0 = time.perf_counter()
        for start in range(0, len(items), CHUNK):
            chunk = items[start : start + CHUNK]
            vectors = model.embed([text for _, text in chunk])
            base = len(self._vectors)
            self._vectors = np.concatenate([self._vectors, vectors.astype(np.float32)])
            for offset, (key, _) in enumerate(chunk):
                self._rows[key] = base + offset
            self.embedded += len(chunk)
            self._save()
            done = min(start + CHUNK, len(items))
            self.log(f"embedded {done}/{len(items)} texts into {self.path.name} ({time.perf_counter() - t0:.0f} s)")

    def _load_model(self):
        if self._model is None:
            from memoria_pg import SentenceTransformerEmbedder

            if embedding_backend() == "torch":
                self._model = SentenceTransformerEmbedder(self.model_path, batch_size=self.batch_size)
            else:
                from memoria_pg.core.embedding_onnx import OnnxEmbedder

                quantized = embedding_backend() == "onnx-int8"
                self._model = OnnxEmbedder(self.model_path, quantized=quantized, batch_size=self.batch_size)
            if self._model.dim != self.dim:
                raise ValueError(f"model makes {self._model.dim}-dimensional vectors, expected {self.dim}")
        return self._model

    def _save(self) -> None:
        """Write what this object holds, merged with what the file holds now, under an exclusive lock
        on a file beside it: another run (a CI run beside a full evaluation) may have saved texts since
        this one read the file, and a plain replace would drop them (that lost a whole data set's
        vectors once: an hour of embedding)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(f"{self.path.name}.lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._merge_file()
            keys = np.zeros((len(self._rows), 16), dtype=np.uint8)
            for key, row in self._rows.items():
                keys[row] = np.frombuffer(key, dtype=np.uint8)
            tmp = self.path.with_name(f"{self.path.stem}.{os.getpid()}.tmp.npz")
            np.savez(tmp, keys=keys, vectors=self._vectors)
            os.replace(tmp, self.path)

    def _merge_file(self) -> None:
        """Take in the texts the file holds that this object does not (saved by another run)."""
        if not self.path.exists():
            return
        with np.load(self.path) as data:
            keys, vectors = data["keys"], data["vectors"].astype(np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            return
        new = [i for i, k in enumerate(keys) if bytes(k) not in self._rows]
        if not new:
            return
        base = len(self._vectors)
        self._vectors = np.concatenate([self._vectors, vectors[new]])
        for offset, i in enumerate(new):
            self._rows[bytes(keys[i])] = base + offset
