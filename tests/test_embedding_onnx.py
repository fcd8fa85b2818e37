"""The ONNX Runtime embedding backend: parity with sentence-transformers, the one-time export, the
setting, the errors, and a query process that imports no torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from memoria_pg import Config
from memoria_pg.errors import ConfigError

pytestmark = pytest.mark.model

onnxruntime = pytest.importorskip("onnxruntime")

# A long text (well over the model's 256 word pieces: tokenizer.json's own 128-piece truncation
# would change its vector), texts of very different lengths in one padded batch, accents, CJK, empty.
TEXTS = [
    "hi",
    "What is Maya's favourite colour?",
    "Jonas moved to Porto in 2019 and works as a nurse at the city hospital. " * 30,
    "naïve café über Straße 東京",
    "",
    "The committee approved the budget for the next fiscal year after a long debate.",
]


@pytest.fixture(scope="module")
def torch_vectors() -> np.ndarray:
    from memoria_pg import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder().embed(TEXTS)


@pytest.fixture(scope="module")
def onnx_embedder():
    from memoria_pg.core.embedding_onnx import OnnxEmbedder

    return OnnxEmbedder()  # exported into the user cache on the first run, reused after


def _cos_gap(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return 1.0 - (a * b).sum(axis=1)


def test_the_onnx_vectors_are_the_torch_vectors(torch_vectors, onnx_embedder):
    batch = onnx_embedder.embed(TEXTS)
    assert batch.shape == (len(TEXTS), 384) and batch.dtype == np.float32
    assert np.allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-5)
    assert _cos_gap(torch_vectors, batch).max() < 1e-5
    one_by_one = np.stack([onnx_embedder.embed([t])[0] for t in TEXTS])
    assert _cos_gap(torch_vectors, one_by_one).max() < 1e-5
    assert onnx_embedder.max_tokens == 256


def test_the_int8_vectors_stay_close(torch_vectors):
    from memoria_pg.core.embedding_onnx import INT8_RECIPE, OnnxEmbedder

    int8 = OnnxEmbedder(quantized=True)
    # the recipe is in the file's name: a graph cached by an earlier recipe (model-int8.onnx) is not reused
    assert int8.graph.name == f"model-int8-{INT8_RECIPE}.onnx"
    gap = _cos_gap(torch_vectors, int8.embed(TEXTS))
    # the empty text (two word pieces) moves most, ~0.005; quantize_dynamic's recipe moved them by up to 0.03
    assert gap.max() < 0.01, gap
    assert int8.quantized and int8.name.endswith("-onnx-int8")


def test_an_int8_graph_that_fails_on_this_host_leaves_the_float_graph(monkeypatch, caplog, torch_vectors):
    """An onnxruntime without the 8-bit kernels of its CPU fails when the graph first runs: the default
    backend must still embed, with the float graph, and say why."""
    from memoria_pg.core import embedding_onnx

    real_open = embedding_onnx.OnnxEmbedder._open

    def no_int8_kernels(self, graph, threads):
        if "int8" in graph.name:
            raise RuntimeError(
                "[ONNXRuntimeError] : 1 : FAIL : Only 4b quantization is supported for unpacked compute."
            )
        return real_open(self, graph, threads)

    monkeypatch.setattr(embedding_onnx.OnnxEmbedder, "_open", no_int8_kernels)
    with caplog.at_level("WARNING", logger="memoria_pg.core.embedding_onnx"):
        made = embedding_onnx.OnnxEmbedder(quantized=True)
    assert not made.quantized and made.graph.name == "model.onnx" and made.name.endswith("-onnx")
    assert made.int8_refused is not None and made.int8_refused.endswith("supported for unpacked compute.")
    assert "int8 graph is not used on this host (Only 4b quantization" not in caplog.text  # the first line only
    assert "int8 graph is not used on this host ([ONNXRuntimeError] : 1 : FAIL : Only 4b" in caplog.text
    assert _cos_gap(torch_vectors, made.embed(TEXTS)).max() < 1e-5  # the float graph's vectors


def test_an_int8_graph_whose_vectors_stray_leaves_the_float_graph(monkeypatch, caplog):
    """Its vectors of the probe texts are checked against the float graph's (kept beside it): a graph
    that computes something else on this host is not used."""
    from memoria_pg.core import embedding_onnx

    real = embedding_onnx.OnnxEmbedder._probe_reference
    # the float graph's vectors of the probe texts, in another order: the int8 graph's no longer match
    monkeypatch.setattr(embedding_onnx.OnnxEmbedder, "_probe_reference", lambda self: real(self)[::-1].copy())
    with caplog.at_level("WARNING", logger="memoria_pg.core.embedding_onnx"):
        made = embedding_onnx.OnnxEmbedder(quantized=True)
    assert not made.quantized and made.graph.name == "model.onnx"
    assert "from the float graph's in 1 - cosine" in caplog.text


def test_the_export_command_says_whether_the_int8_graph_is_used_here(onnx_embedder):
    from click.testing import CliRunner

    from memoria_pg.cli import cli

    result = CliRunner().invoke(cli, ["model", "export-onnx"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].endswith("model.onnx") and lines[1].endswith(".onnx") and "int8" in lines[1]
    assert lines[2] == "int8 graph: checked on this host, in use (embedding_backend onnx-int8)"


def test_the_probe_reference_is_kept_beside_the_float_graph(onnx_embedder):
    from memoria_pg.core import embedding_onnx

    kept = onnx_embedder._probe_reference()
    files = list(onnx_embedder.graph.parent.glob("probe-*.npy"))
    assert len(files) == 1 and np.array_equal(np.load(files[0]), kept)
    assert kept.shape == (len(embedding_onnx.PROBE_TEXTS), 384)


def test_the_int8_quantizer_leaves_the_applications_logging_alone():
    """onnxruntime's quantizer module calls logging.basicConfig(level=INFO) when imported: a library must
    not configure its application's root logger, nor print a line per node it leaves in float."""
    import logging
    import sys

    from memoria_pg.core.embedding_onnx import _nbits_quantizer

    sys.modules.pop("onnxruntime.quantization.matmul_nbits_quantizer", None)  # imported afresh: its basicConfig runs
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    root.handlers[:] = []  # an application that has not configured logging (yet)
    try:
        _nbits_quantizer()
        assert root.handlers == [] and root.level == level
        assert logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").level == logging.WARNING
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def test_the_export_is_made_once_and_reused(onnx_embedder):
    from memoria_pg.core.embedding_onnx import ensure_onnx

    before = onnx_embedder.graph.stat().st_mtime_ns
    assert ensure_onnx(onnx_embedder.folder) == onnx_embedder.graph
    assert onnx_embedder.graph.stat().st_mtime_ns == before


def test_changed_weights_get_a_new_export(tmp_path):
    from memoria_pg.core.embedding_onnx import onnx_paths

    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"x" * 10)
    first, _ = onnx_paths(folder, tmp_path / "cache")
    (folder / "model.safetensors").write_bytes(b"y" * 11)
    second, _ = onnx_paths(folder, tmp_path / "cache")
    assert first != second and first.parent.name.startswith("my-model-")


def test_an_unwritable_cache_is_a_config_error(tmp_path, onnx_embedder):
    from memoria_pg.core.embedding_onnx import ensure_onnx

    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(ConfigError, match="cannot write the ONNX graph.*MEMORIA_MODEL_CACHE"):
        ensure_onnx(onnx_embedder.folder, cache_dir=blocker / "onnx")


def test_the_backend_is_a_checked_setting(monkeypatch):
    # the default: int8 at evaluation parity (results/20261206-074756-onnx-int8/), the float graph where it cannot run
    assert Config().embedding_backend == "onnx-int8"
    assert Config.from_env({"MEMORIA_EMBEDDING_BACKEND": "onnx"}).embedding_backend == "onnx"
    assert Config.from_env({"MEMORIA_EMBEDDING_BACKEND": "onnx-int8"}).embedding_backend == "onnx-int8"
    with pytest.raises(ConfigError, match="embedding_backend must be one of"):
        Config(embedding_backend="tensorrt")


def test_the_system_builds_the_configured_backend(onnx_embedder):
    from memoria_pg.core.embedding_onnx import OnnxEmbedder
    from memoria_pg.system import _default_embedder

    made = _default_embedder(Config(embedding_backend="onnx"))
    assert isinstance(made, OnnxEmbedder) and made.graph == onnx_embedder.graph


def test_a_missing_onnxruntime_is_a_config_error(monkeypatch):
    from memoria_pg.core.embedding_onnx import OnnxEmbedder

    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails
    with pytest.raises(ConfigError, match="pip install 'memoria-pg\\[onnx\\]'"):
        OnnxEmbedder()


def test_a_model_folder_that_is_not_one_is_a_config_error(tmp_path):
    from memoria_pg.core.embedding_onnx import OnnxEmbedder

    with pytest.raises(ConfigError, match="is not a directory"):
        OnnxEmbedder(str(tmp_path / "nowhere"))


def test_a_model_the_graph_does_not_compute_is_a_config_error(tmp_path, onnx_embedder):
    import shutil

    from memoria_pg.core.embedding_onnx import check_supported

    folder = tmp_path / "cls-pooled"
    shutil.copytree(onnx_embedder.folder, folder, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    check_supported(folder)  # the copy is as supported as the original
    pooling = folder / "1_Pooling" / "config.json"
    cfg = json.loads(pooling.read_text())
    pooling.write_text(json.dumps({**cfg, "pooling_mode_mean_tokens": False, "pooling_mode_cls_token": True}))
    with pytest.raises(ConfigError, match="mean pooling expected.*embedding_backend='torch'"):
        check_supported(folder)


QUERY_PROCESS = """
import atexit, json, sys
heavy = ("torch", "sentence_transformers", "transformers", "alembic", "sqlalchemy", "evals")
atexit.register(lambda: print("MODULES " + json.dumps(sorted({m.split(".")[0] for m in sys.modules} & set(heavy)))))
from memoria_pg.cli import main
sys.argv = ["memoria-pg", "--dsn", sys.argv[1], "query", "where does Maya live?", "--tenant", "maya"]
main()
"""


def test_a_query_process_on_onnx_imports_no_torch_alembic_or_evals(dsn, onnx_embedder):
    from memoria_pg.core.embedding_onnx import OnnxEmbedder
    from memoria_pg.system import MemorySystem

    with MemorySystem(Config(dsn=dsn), embedder=OnnxEmbedder()) as system:
        system.store("Maya lives in Porto.", tenant="maya")
    env = {**os.environ, "MEMORIA_EMBEDDING_BACKEND": "onnx"}
    done = subprocess.run(
        [sys.executable, "-c", QUERY_PROCESS, dsn], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "Porto" in done.stdout
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("MODULES "))
    assert json.loads(line.removeprefix("MODULES ")) == []


def test_a_probe_reference_that_cannot_be_kept_is_computed_and_nothing_is_left(onnx_embedder, tmp_path, monkeypatch):
    """A cache folder the process cannot write (a read-only image): the float graph's probe vectors are
    computed in place, and no partial file stays behind."""
    from memoria_pg.core import embedding_onnx

    folder = tmp_path / "graphs"
    folder.mkdir()
    (folder / "model.onnx").symlink_to(onnx_embedder.graph)
    monkeypatch.setattr(onnx_embedder, "graph", folder / "model.onnx")

    def full_disk(file, array, *args, **kwargs):
        file.write(b"\x93NUMPY")  # a partial write, then the failure
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(embedding_onnx.np, "save", full_disk)
    vectors = onnx_embedder._probe_reference()
    assert vectors.shape == (len(embedding_onnx.PROBE_TEXTS), 384)
    assert sorted(p.name for p in folder.iterdir()) == ["model.onnx"]
