"""The evaluation's embedding cache (evals/cache.py): two runs that share the file keep each other's
texts. Pure file logic: the model is a stand-in that makes a vector from the text."""

from __future__ import annotations

import hashlib

import numpy as np

from evals.cache import EmbeddingCache

DIM = 4


class TextVectors:
    """A deterministic unit vector per text (what the model would be asked for)."""

    dim = DIM

    def __init__(self) -> None:
        self.calls: list[str] = []

    def embed(self, texts):
        self.calls.extend(texts)
        rows = [np.frombuffer(hashlib.sha256(t.encode()).digest()[: DIM * 4], dtype=np.uint32) for t in texts]
        out = np.array(rows, dtype=np.float64) + 1.0
        return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


def cache(path) -> tuple[EmbeddingCache, TextVectors]:
    c, model = EmbeddingCache(path, dim=DIM), TextVectors()
    c._model = model  # the stand-in instead of loading sentence-transformers
    return c, model


def test_two_runs_sharing_the_file_keep_each_others_texts(tmp_path):
    path = tmp_path / "set-model.npz"
    a, _ = cache(path)
    b, _ = cache(path)  # both read the (absent) file before either saves, as two concurrent runs do
    va = a.embed(["alpha", "beta"])
    vb = b.embed(["gamma"])  # saved last: before the merge, it replaced the file with its one text

    fresh, model = cache(path)
    assert len(fresh) == 3
    got = fresh.embed(["alpha", "beta", "gamma"])
    assert model.calls == []  # nothing embedded again
    np.testing.assert_array_equal(got, np.concatenate([va, vb]))
    # the run that saved last took in the other's texts too
    assert len(b) == 3


def test_a_run_reads_what_it_saved_and_embeds_only_what_is_missing(tmp_path):
    path = tmp_path / "set-model.npz"
    first, _ = cache(path)
    first.embed(["one", "two"])
    second, model = cache(path)
    out = second.embed(["two", "three", "one"])
    assert model.calls == ["three"]
    assert out.shape == (3, DIM) and np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(out[[0, 2]], first.embed(["two", "one"]))


def test_each_backend_and_int8_recipe_is_cached_apart(monkeypatch):
    """The int8 graph's recipe is in the cache's name: vectors of an earlier int8 recipe are not reused."""
    from evals.cache import model_label
    from memoria_pg.core.embedding_onnx import INT8_RECIPE

    labels = {}
    for backend in ("torch", "onnx", "onnx-int8"):
        monkeypatch.setenv("MEMORIA_EMBEDDING_BACKEND", backend)
        labels[backend] = model_label(None)
    assert labels == {
        "torch": "all-MiniLM-L6-v2",
        "onnx": "all-MiniLM-L6-v2-onnx",
        "onnx-int8": f"all-MiniLM-L6-v2-onnx-int8-{INT8_RECIPE}",
    }
