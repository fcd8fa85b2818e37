"""The embedder on ONNX Runtime: the same model as SentenceTransformerEmbedder, without torch at query time.

The ONNX graph is exported once, locally, from the model folder's own weights (torch and
transformers are needed for that step only; nothing is downloaded) into a cache folder, and reused
by every later process: `memoria-pg model export-onnx` does it ahead of time, and the first
OnnxEmbedder made for a model does it otherwise. The graph holds the whole sentence-transformers
pipeline of all-MiniLM-L6-v2 (BERT, mean pooling over the attention mask, L2 normalization); the
tokenizer is the model folder's tokenizer.json read by `tokenizers`, truncated at the model's
max_seq_length (256 word pieces, sentence_bert_config.json), as sentence-transformers does.

`quantized=True` runs the int8 version (8-bit weights in blocks, int8 compute with the activations
quantized at run time: quantize_onnx), made from the float graph on first use.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError

BACKENDS = ("torch", "onnx", "onnx-int8")
CACHE_ENV = "MEMORIA_MODEL_CACHE"  # where exported models live (default: the user's cache folder)
OPSET = 17
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_EXPORT_LOCK = threading.Lock()
# The int8 recipe, named in the int8 graph's file name: a graph cached by an earlier recipe is not reused.
INT8_BLOCK = 128
INT8_RECIPE = f"nbits8-b{INT8_BLOCK}"
# Before the int8 graph embeds anything in a process, its vectors of PROBE_TEXTS are compared with the
# float graph's (kept beside the float graph after the first time): more than INT8_TOLERANCE apart in
# 1 - cosine, or a graph that fails to load or run on this host (an onnxruntime without the 8-bit
# kernels of its CPU), and the float graph embeds instead. The recipe's largest gap over 3,000
# evaluation texts is 0.0055 (results/embedding/20261206T072122-int8-recipes.md).
PROBE_TEXTS = (
    "Where does Maya live, and since when?",
    "Jonas moved to Porto in 2019 and works as a nurse at the city hospital.",
    "naïve café über Straße 東京",
)
INT8_TOLERANCE = 0.02
_PROBE_KEY = hashlib.sha256("\n".join(PROBE_TEXTS).encode()).hexdigest()[:12]
log = logging.getLogger(__name__)


def default_cache_dir() -> Path:
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("memoria-pg")) / "onnx"


def model_fingerprint(model_dir: Path) -> str:
    """Names the export of one model folder: its name and its weights' size and modification time
    (cheap: a query process does not hash 90 MB), so changed weights are exported anew."""
    parts = [model_dir.name]
    for name in ("model.safetensors", "pytorch_model.bin", "config.json", "tokenizer.json"):
        path = model_dir / name
        if path.exists():
            st = path.stat()
            parts.append(f"{name}:{st.st_size}:{st.st_mtime_ns}")
    digest = hashlib.blake2b("|".join(parts).encode(), digest_size=6).hexdigest()
    return f"{model_dir.name}-{digest}"


def onnx_paths(model_dir: Path, cache_dir: Path | None = None) -> tuple[Path, Path]:
    """Where the float and the int8 graphs of `model_dir` are (or will be) kept."""
    folder = (cache_dir or default_cache_dir()) / model_fingerprint(model_dir)
    return folder / "model.onnx", folder / f"model-int8-{INT8_RECIPE}.onnx"


def ensure_onnx(model_dir: Path, *, quantized: bool = False, cache_dir: Path | None = None) -> Path:
    """The ONNX graph of `model_dir` (int8 when `quantized`), exported now from its weights if absent."""
    fp32, int8 = onnx_paths(model_dir, cache_dir)
    with _EXPORT_LOCK:
        try:
            if not fp32.exists():
                export_onnx(model_dir, fp32)
            if quantized and not int8.exists():
                quantize_onnx(fp32, int8)
        except OSError as exc:
            raise ConfigError(
                f"cannot write the ONNX graph into {str(fp32.parent)!r} ({exc}): set {CACHE_ENV} to a writable folder"
            ) from exc
    return int8 if quantized else fp32


def export_onnx(model_dir: Path, out: Path) -> None:
    """Export BERT + mean pooling + normalization from the local weights (torch's TorchScript exporter)."""
    try:
        import torch
        from transformers import AutoModel
    except ImportError:
        raise ConfigError(
            f"exporting the ONNX model needs torch and transformers once (no ONNX graph in {out.parent}): "
            "pip install 'memoria-pg[embeddings]' and run `memoria-pg model export-onnx`, or use "
            "embedding_backend='torch'"
        ) from None
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from .embedding import _quiet_transformers

    _quiet_transformers()
    # Eager attention, and a padded sample: the traced graph must keep the attention mask's path
    # (an all-ones sample lets transformers drop the mask, and the trace would keep that choice).
    bert = AutoModel.from_pretrained(str(model_dir), local_files_only=True, attn_implementation="eager").eval()
    module = _sentence_module(bert)
    sample = {name: torch.ones((2, 8), dtype=torch.int64) for name in _INPUTS}
    sample["attention_mask"][1, 5:] = 0
    sample["token_type_ids"] = torch.zeros((2, 8), dtype=torch.int64)
    axes = {name: {0: "batch", 1: "tokens"} for name in _INPUTS}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer notes about Python-level branches: noise for the user
        torch.onnx.export(
            module,
            (sample["input_ids"], sample["attention_mask"], sample["token_type_ids"]),
            str(tmp),
            input_names=list(_INPUTS),
            output_names=["sentence_embedding"],
            dynamic_axes={**axes, "sentence_embedding": {0: "batch"}},
            opset_version=OPSET,
            dynamo=False,
        )
    os.replace(tmp, out)  # atomic: a concurrent process sees no half-written graph


def _sentence_module(bert: Any) -> Any:
    """BERT, then mean pooling over the attention mask, then L2 normalization (torch imported here only)."""
    import torch

    class SentenceModule(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            tokens = self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(tokens.dtype)
            summed = (tokens * mask).sum(dim=1)
            pooled = summed / mask.sum(dim=1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2.0, dim=1)

    return SentenceModule()


def quantize_onnx(fp32: Path, out: Path) -> None:
    """The int8 graph (INT8_RECIPE), made by ONNX Runtime's own MatMulNBitsQuantizer: every weight
    MatMul becomes MatMulNBits with 8-bit symmetric weights, one scale per block of INT8_BLOCK rows of
    each output column, computed in int8 (accuracy_level 4: the activations are quantized at run time
    per row and block, not per tensor). No calibration data; the embeddings table (Gather) and the
    attention's own products stay float.

    The earlier recipe (quantize_dynamic: per-channel int8 weights, uint8 activations with one scale
    per tensor) took ~2.3x less CPU per query than the float graph but moved all-MiniLM-L6-v2's vectors
    by up to 0.019 in 1 - cosine (mean 0.006) and a metric by up to 0.0375 (LoCoMo recall@5, on a
    40-query subset). This one moves them by up to 0.0055 (mean 0.0008 over 3,000 evaluation texts;
    every set's main dense metric within 0.0023 of the float graph's, every main metric of `memoria-pg
    eval` within 0.004) for ~1.5x less CPU per query, and only ~1.1x in batches
    (benchmarks/int8_recipes.py, results/embedding/*-int8-recipes.md). The file name carries
    INT8_RECIPE, so a graph cached by an earlier recipe is not reused."""
    try:
        import onnx

        quantizer = _nbits_quantizer()
    except ImportError:
        raise ConfigError(
            "int8 quantization needs onnxruntime >= 1.23, onnx and onnx-ir: pip install 'memoria-pg[onnx]'"
        ) from None
    q = quantizer(onnx.load(str(fp32)), bits=8, block_size=INT8_BLOCK, is_symmetric=True, accuracy_level=4)
    q.process()
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    onnx.save(q.model.model, str(tmp))
    os.replace(tmp, out)


def _nbits_quantizer() -> Any:
    """onnxruntime's MatMulNBitsQuantizer. Its module configures the root logger at INFO when it is
    imported (logging.basicConfig), and logs every node it skips: the application's logging is put
    back as it was, and the module's own logger shows only warnings."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
    return MatMulNBitsQuantizer


class OnnxEmbedder:
    """A local sentence-transformers model folder run by ONNX Runtime (CPU). One query runs on one
    thread (more only fight PostgreSQL's backends for the cores); a batch runs on `threads` (0: one
    per core), in a second session made on the first batch."""

    def __init__(
        self,
        model_path: str | None = None,
        *,
        quantized: bool = False,
        batch_size: int = 64,
        threads: int = 0,
        cache_dir: Path | None = None,
    ) -> None:
        ort = _onnxruntime()
        from tokenizers import Tokenizer

        from .embedding import _packaged_model

        folder = Path(model_path or _packaged_model())
        if not folder.is_dir():
            raise ConfigError(f"embedding model path {str(folder)!r} is not a directory: give a local model folder")
        check_supported(folder)
        self.folder = folder
        self.graph = ensure_onnx(folder, cache_dir=cache_dir)  # the float graph, exported on first use
        self.quantized = False
        self.int8_refused: str | None = None  # why the int8 graph asked for is not used here
        self.max_tokens = _max_seq_length(folder)
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=self.max_tokens)
        self.tokenizer.no_padding()
        self.batch_size = batch_size
        self.threads = threads
        self._ort = ort
        single = self._take_int8(cache_dir) if quantized else None
        self.name = folder.name + ("-onnx-int8" if self.quantized else "-onnx")
        self._single = single if single is not None else self._session(1)
        self._batch: Any = None
        self._lock = threading.Lock()
        width = self._single.get_outputs()[0].shape[-1]
        self.dim = width if isinstance(width, int) else int(self._run(self._single, ["dimension"]).shape[1])

    def _take_int8(self, cache_dir: Path | None) -> Any:
        """The int8 graph's one-thread session, if the graph runs on this host and its vectors of
        PROBE_TEXTS are within INT8_TOLERANCE of the float graph's; else None (the float graph embeds),
        and a warning that says why."""
        try:
            int8 = ensure_onnx(self.folder, quantized=True, cache_dir=cache_dir)
            session = self._open(int8, 1)
            got = self._run(session, list(PROBE_TEXTS))
            gap = float(np.max(1.0 - (got * self._probe_reference()).sum(axis=1)))
            if not gap <= INT8_TOLERANCE:  # NaN too
                raise ValueError(f"its vectors are {gap:.4f} from the float graph's in 1 - cosine")
        except Exception as exc:  # any failure of the optional graph: the float one embeds
            reason = next(iter(str(exc).strip().splitlines()), "") or type(exc).__name__
            self.int8_refused = reason
            log.warning(
                "embedding_backend onnx-int8: the int8 graph is not used on this host (%s); "
                "the float graph embeds instead (embedding_backend onnx)",
                reason,
            )
            return None
        self.graph, self.quantized = int8, True
        return session

    def _probe_reference(self) -> np.ndarray:
        """The float graph's vectors of PROBE_TEXTS, kept in a file beside it after the first time (no
        float session to load then); computed in place when that file cannot be read or written."""
        path = self.graph.with_name(f"probe-{_PROBE_KEY}.npy")
        with contextlib.suppress(OSError, ValueError):
            kept: np.ndarray = np.load(path)
            if kept.ndim == 2 and len(kept) == len(PROBE_TEXTS) and kept.dtype == np.float32:
                return kept
        vectors = self._run(self._open(self.graph, 1), list(PROBE_TEXTS))
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as f:
                np.save(f, vectors)
            os.replace(tmp, path)
        except OSError:  # a read-only cache: computed again by the next process
            with contextlib.suppress(OSError):
                tmp.unlink()
        return vectors

    def _session(self, threads: int) -> Any:
        return self._open(self.graph, threads)

    def _open(self, graph: Path, threads: int) -> Any:
        options = self._ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = self._ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        return self._ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, getattr(self, "dim", 0)), dtype=np.float32)
        if len(texts) == 1:
            return self._run(self._single, list(texts))
        with self._lock:
            if self._batch is None:
                self._batch = self._session(self.threads)
        # Longest first, in batches: similar lengths pad less (as sentence-transformers does).
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            out[rows] = self._run(self._batch, [texts[i] for i in rows])
        return out

    def _run(self, session: Any, texts: list[str]) -> np.ndarray:
        encodings = self.tokenizer.encode_batch(texts)
        width = max(len(e.ids) for e in encodings)
        feed = {name: np.zeros((len(texts), width), dtype=np.int64) for name in _INPUTS}
        for row, enc in enumerate(encodings):
            n = len(enc.ids)
            feed["input_ids"][row, :n] = enc.ids
            feed["attention_mask"][row, :n] = enc.attention_mask
            feed["token_type_ids"][row, :n] = enc.type_ids
        (vectors,) = session.run(None, feed)
        return np.asarray(vectors, dtype=np.float32)


def _onnxruntime() -> Any:
    try:
        import onnxruntime
    except ImportError:
        raise ConfigError(
            "the ONNX embedding backend needs onnxruntime: pip install 'memoria-pg[onnx]', "
            "or set embedding_backend='torch'"
        ) from None
    onnxruntime.set_default_logger_severity(3)  # warnings about the graph are noise in a library
    return onnxruntime


def check_supported(folder: Path) -> None:
    """ConfigError unless the folder holds what the exported graph computes: a BERT model (token ids
    padded with 0), then mean pooling, then (optionally) normalization, as all-MiniLM-L6-v2 is."""
    modules = _json(folder / "modules.json") or []
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules if isinstance(m, dict)]
    pooling = next((m for m in modules if isinstance(m, dict) and str(m.get("type", "")).endswith("Pooling")), None)
    pool_cfg = _json(folder / str(pooling.get("path", "")) / "config.json") if pooling else None
    modes = {k for k, v in (pool_cfg or {}).items() if k.startswith("pooling_mode") and v is True}
    model_type = (_json(folder / "config.json") or {}).get("model_type")
    problems = []
    if model_type != "bert":
        problems.append(f"model_type {model_type!r} (only 'bert' is exported)")
    if kinds[:2] != ["Transformer", "Pooling"] or not set(kinds[2:]) <= {"Normalize"}:
        problems.append(f"modules {kinds} (Transformer, Pooling[, Normalize] expected)")
    if modes != {"pooling_mode_mean_tokens"}:
        problems.append(f"pooling {sorted(modes)} (mean pooling expected)")
    if problems:
        raise ConfigError(
            f"the ONNX embedding backend cannot run the model in {str(folder)!r}: {'; '.join(problems)}; "
            "set embedding_backend='torch'"
        )


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _max_seq_length(folder: Path) -> int:
    """The model's window as sentence-transformers applies it: sentence_bert_config.json's max_seq_length,
    capped by the tokenizer's model_max_length (tokenizer.json's own truncation, 128, is not the one used)."""
    limit = 512
    for name, key in (("tokenizer_config.json", "model_max_length"), ("sentence_bert_config.json", "max_seq_length")):
        value = (_json(folder / name) or {}).get(key)
        if isinstance(value, int) and value > 0:
            limit = min(limit, value)
    return limit
