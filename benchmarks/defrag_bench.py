"""Benchmark exact duplicate detection (``memwork.similarity``) against the guide's pairwise loop.

Generates stores with 384-dim embeddings and planted near-duplicates, then checks the targets of
issue 2: N=2,000 same pairs as the plain pairwise reference and >= 300x faster; N=20,000 in <= 15 s;
N=100,000 in <= 180 s with peak RSS <= 3 GB. Each size runs in a fresh subprocess so its peak RSS is
its own. Exit status 1 when a target is missed.

    .venv/bin/python benchmarks/defrag_bench.py [--sizes 2000,20000,100000] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from memwork.similarity import find_duplicate_pairs, find_related_pairs, jaccard, tokenize

DIM = 384
THRESHOLD = 0.85  # the guide's default similarity_threshold
RELATED = (0.60, 0.85)
TARGETS = {2000: {"speedup": 300.0}, 20000: {"seconds": 15.0}, 100000: {"seconds": 180.0, "peak_mb": 3072.0}}

_COMMON_TEXT = (
    "the a of to in for with on and is uses when after before from by user agent memory note "
    "service config setting prefers should must was were via task project team"
)
COMMON = _COMMON_TEXT.split()
TEMPLATES = [
    "the {} service uses {} for {} in {} with {} and {}",
    "user prefers {} over {} when working on {} and {} tasks",
    "note {} config setting {} must be {} before {} deploy to {}",
    "agent memory {} was {} after {} from {} via {} on {}",
    "project {} team should {} the {} with {} and {} before {}",
    "when {} is {} the {} task uses {} for {} and {} in {}",
]


@dataclass
class Store:
    """A generated store: texts, embeddings (some None), and which rows are planted copies."""

    texts: list[str]
    embeddings: list[np.ndarray | None]
    planted: int


def _vocabulary(rng: np.random.Generator, size: int) -> np.ndarray:
    """Pronounceable synthetic words; Zipf-sampled so a few are common and most are rare."""
    syllables = np.array(["ka", "lo", "mi", "ne", "ru", "ta", "vo", "zi", "pe", "sa", "do", "gu", "xe", "fi"])
    parts = rng.integers(0, len(syllables), size=(size, 3))
    words = {"".join(syllables[p]) + str(k % 97) for k, p in enumerate(parts)}
    return np.array(sorted(words))


def _unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def make_store(n: int, seed: int = 0, dup_rate: float = 0.06, rel_rate: float = 0.04) -> Store:
    """Template x Zipf vocabulary texts; planted duplicates (small edits, cosine ~0.78-0.99) and
    related variants (cosine ~0.6-0.8); 5% of entries without an embedding."""
    rng = np.random.default_rng(seed)
    vocab = _vocabulary(rng, 20000)
    weights = 1.0 / (np.arange(len(vocab)) + 20.0)
    weights /= weights.sum()
    texts: list[str] = []
    emb = _unit(rng.standard_normal((n, DIM)).astype(np.float32))
    kind = rng.random(n)
    for k in range(n):
        if k > 10 and kind[k] < dup_rate + rel_rate:
            src = int(rng.integers(0, k))
            words = texts[src].split()
            edits = int(rng.integers(0, 3)) if kind[k] < dup_rate else int(rng.integers(2, 5))
            for _ in range(edits):
                words[int(rng.integers(0, len(words)))] = str(rng.choice(vocab, p=weights))
            texts.append(" ".join(words))
            spread = rng.uniform(0.1, 0.8) if kind[k] < dup_rate else rng.uniform(0.75, 1.3)
            noise = rng.standard_normal(DIM).astype(np.float32)
            emb[k] = emb[src] + spread * noise / np.linalg.norm(noise)
            emb[k] /= np.linalg.norm(emb[k])
            continue
        template = TEMPLATES[int(rng.integers(0, len(TEMPLATES)))]
        slots = rng.choice(vocab, size=template.count("{}"), p=weights)
        extra = rng.choice(COMMON, size=int(rng.integers(0, 4)))
        texts.append(template.format(*slots) + " " + " ".join(extra))
    embeddings: list[np.ndarray | None] = list(emb)
    for k in np.flatnonzero(rng.random(n) < 0.05):
        embeddings[int(k)] = None
    return Store(texts, embeddings, int((kind[11:] < dup_rate).sum()))


def _guide_cosine(u: np.ndarray, v: np.ndarray) -> float:
    """The guide's cosine: dot and both magnitudes per pair (numpy dot, float64)."""
    mag = math.sqrt(float(np.dot(u, u))) * math.sqrt(float(np.dot(v, v)))
    return float(np.dot(u, v)) / mag if mag else 0.0


def reference_guide(texts: Sequence[str], embeddings: Sequence[np.ndarray | None]) -> list[tuple[int, int]]:
    """The guide's find_duplicates, literally: every pair, Jaccard of the two texts, cosine, max."""
    vecs = [None if e is None else np.asarray(e, dtype=np.float64) for e in embeddings]
    pairs = []
    for i in range(len(texts)):
        for j in range(i + 1, len(texts)):
            text = jaccard(texts[i], texts[j])
            u, v = vecs[i], vecs[j]
            best = text if u is None or v is None else max(text, _guide_cosine(u, v))
            if best >= THRESHOLD:
                pairs.append((i, j))
    return pairs


def reference_cached(texts: Sequence[str], embeddings: Sequence[np.ndarray | None]) -> list[tuple[int, int]]:
    """A stronger pairwise loop: tokens and norms computed once, then every pair one by one."""
    tokens = [tokenize(t) for t in texts]
    vecs = [None if e is None else np.asarray(e, dtype=np.float64) for e in embeddings]
    norms = [0.0 if v is None else math.sqrt(float(np.dot(v, v))) for v in vecs]
    pairs = []
    for i in range(len(texts)):
        ti, u = tokens[i], vecs[i]
        for j in range(i + 1, len(texts)):
            union = len(ti | tokens[j])
            best = len(ti & tokens[j]) / union if union else 0.0
            v = vecs[j]
            if u is not None and v is not None:
                mag = norms[i] * norms[j]
                best = max(best, float(np.dot(u, v)) / mag if mag else 0.0)
            if best >= THRESHOLD:
                pairs.append((i, j))
    return pairs


def _timed(fn: Callable[[], Any], repeat: int = 1) -> tuple[Any, float]:
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return result, best


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def _engine_path(store: Store) -> float | None:
    """Time the engine's pure ``memwork.defrag.find_duplicates`` over entries (grouping included)."""
    try:
        from memwork.defrag import find_duplicates
        from memwork.entry import Entry
    except ImportError:
        return None
    entries = [
        Entry(path=f"bench/{k:06d}.md", content=t, embedding=e)
        for k, (t, e) in enumerate(zip(store.texts, store.embeddings, strict=True))
    ]
    _, seconds = _timed(lambda: find_duplicates(entries, THRESHOLD))
    return seconds


def run_size(n: int, skip: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Generate a store of ``n`` entries and measure; runs inside the per-size subprocess."""
    start = time.perf_counter()
    store = make_store(n)
    row: dict[str, Any] = {"n": n, "planted": store.planted, "generate_s": time.perf_counter() - start}
    repeat = 3 if n <= 5000 else 1
    pairs, seconds = _timed(lambda: find_duplicate_pairs(store.texts, store.embeddings, THRESHOLD), repeat)
    row.update(pairs=len(pairs), seconds=seconds)
    if "related" not in skip:
        related, rel_seconds = _timed(lambda: find_related_pairs(store.embeddings, *RELATED), repeat)
        row.update(related_pairs=len(related), related_seconds=rel_seconds)
    if n <= 5000 and "reference" not in skip:
        found = {(p.i, p.j) for p in pairs}
        guide, guide_s = _timed(lambda: reference_guide(store.texts, store.embeddings))
        cached, cached_s = _timed(lambda: reference_cached(store.texts, store.embeddings))
        row.update(reference_s=guide_s, speedup=guide_s / seconds, same_pairs=found == set(guide))
        row.update(reference_cached_s=cached_s, speedup_cached=cached_s / seconds)
        row["same_pairs"] = row["same_pairs"] and found == set(cached)
    row["engine_s"] = None if "engine" in skip else _engine_path(store)
    row["peak_mb"] = _peak_mb()
    return row


def check(row: dict[str, Any]) -> list[str]:
    """Targets missed by one measured size (empty when all met)."""
    missed = []
    target = TARGETS.get(row["n"], {})
    if row.get("same_pairs") is False:
        missed.append("pair set differs from the reference")
    if "speedup" in target and row.get("speedup", 0.0) < target["speedup"]:
        missed.append(f"speedup {row.get('speedup', 0):.0f}x < {target['speedup']:.0f}x")
    if "seconds" in target and row["seconds"] > target["seconds"]:
        missed.append(f"{row['seconds']:.1f} s > {target['seconds']:.0f} s")
    if "peak_mb" in target and row["peak_mb"] > target["peak_mb"]:
        missed.append(f"peak {row['peak_mb']:.0f} MB > {target['peak_mb']:.0f} MB")
    return missed


def _in_subprocess(n: int, skip: str) -> dict[str, Any]:
    command = [sys.executable, __file__, "--single", str(n), "--skip", skip]
    out = subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _times(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}x"


def print_table(rows: list[dict[str, Any]]) -> None:
    head = f"{'N':>8} {'pairs':>7} {'dup s':>8} {'guide s':>8} {'speedup':>8} {'cached s':>8} {'speedup':>8} "
    print(head + f"{'related s':>9} {'engine s':>9} {'peak MB':>8}  result")
    for row in rows:
        missed = row["missed"]
        same = "" if "same_pairs" not in row else (" same pairs;" if row["same_pairs"] else " DIFFERENT;")
        print(
            f"{row['n']:>8} {row['pairs']:>7} {row['seconds']:>8.3f} "
            f"{_fmt(row.get('reference_s'), '8.2f'):>8} "
            f"{_times(row.get('speedup')):>8} {_fmt(row.get('reference_cached_s'), '8.2f'):>8} "
            f"{_times(row.get('speedup_cached')):>8} "
            f"{_fmt(row.get('related_seconds'), '9.3f'):>9} {_fmt(row.get('engine_s'), '9.3f'):>9} "
            f"{row['peak_mb']:>8.0f} "
            f"{same} {'ok' if not missed else 'MISSED: ' + '; '.join(missed)}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2000,20000,100000", help="comma-separated store sizes")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--skip", default="", help="comma-separated parts not to time: related, engine, reference"
    )
    parser.add_argument("--single", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.single:
        print(json.dumps(run_size(args.single, frozenset(filter(None, args.skip.split(","))))))
        return 0
    rows = []
    for n in (int(s) for s in args.sizes.split(",") if s.strip()):
        row = _in_subprocess(n, args.skip)
        row["missed"] = check(row)
        rows.append(row)
    ok = not any(row["missed"] for row in rows)
    if args.json:
        print(json.dumps({"ok": ok, "threshold": THRESHOLD, "related": RELATED, "rows": rows}, indent=2))
    else:
        print_table(rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
