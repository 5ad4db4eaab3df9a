"""memwork's exact duplicate search against the bare matrix-product limit, in one run (issue 20).

For each size (default 20,000 and 100,000 entries of 384-d; ``--with-200k`` adds 200,000) the store of
``defrag_bench.make_store`` is generated once, then every part runs in a fresh subprocess of its own
(so its peak RSS is its own), in turn:

* ``bare``: the limit -- the same unit float32 vectors, upper triangle only, 1,024-row panels against
  the rest of the matrix into preallocated ``out=`` buffers, threshold and count; nothing else;
  ``bare_tiles``: the same in 1,024 x 8,192 tiles (memwork's shape); the ratios are taken against
  the faster of the two, so a tile shape that merely beats the panel reference flatters nothing;
* ``cosine``: memwork's cosine join (float32 unit rows, tiles, exact re-score of the candidates);
* ``find_duplicates``: the whole ``memwork.defrag.find_duplicates`` over ``Entry`` objects
  (tokenising, both joins, exact scores, scopes, sorting);
* ``jaccard``: memwork's Jaccard join alone (tokenising, sparse prefix join, exact check), and
  ``setjoin``: a plain AllPairs set-similarity join (prefix and length filtering, Bayardo et al.
  2007) in Python dicts on the same token sets -- the published approach done the textbook way.

Targets: cosine <= 1.2x bare, find_duplicates <= 1.4x bare. Ratios only mean something within one
run; the load average is printed beside each figure. Exit 1 on a missed target.

    .venv/bin/python benchmarks/cosine_limit.py [--sizes 20000,100000] [--with-200k] [--no-setjoin]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from defrag_bench import THRESHOLD, make_store

TARGETS = {"cosine": 1.2, "find_duplicates": 1.4}
PANEL = 1024


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def save(n: int, folder: Path) -> None:
    store = make_store(n)
    mask = np.array([e is not None for e in store.embeddings])
    emb = np.zeros((n, len(next(e for e in store.embeddings if e is not None))), dtype=np.float32)
    emb[mask] = np.stack([e for e in store.embeddings if e is not None])
    np.save(folder / f"emb-{n}.npy", emb)
    np.save(folder / f"mask-{n}.npy", mask)
    (folder / f"texts-{n}.json").write_text(json.dumps(store.texts))


def load(n: int, folder: Path) -> tuple[list[str], list[np.ndarray | None], np.ndarray]:
    emb = np.load(folder / f"emb-{n}.npy")
    mask = np.load(folder / f"mask-{n}.npy")
    texts = json.loads((folder / f"texts-{n}.json").read_text())
    return texts, [emb[k] if mask[k] else None for k in range(n)], emb[mask]


# --- the parts -------------------------------------------------------------------------------------
def part_bare(texts: list[str], embeddings: list[np.ndarray | None], rows: np.ndarray) -> dict[str, Any]:
    """The limit: blocked float32 matrix product of the unit rows, upper triangle, threshold, count."""
    from memwork.similarity import _blas_threads, _threadpools

    unit = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    m = len(unit)
    out = np.empty(PANEL * m, dtype=np.float32)
    hit = np.empty(PANEL * m, dtype=np.bool_)
    started = time.perf_counter()
    count = 0
    with _threadpools().limit(limits=_blas_threads(m), user_api="blas"):  # the same BLAS threads
        for a in range(0, m, PANEL):
            b = min(a + PANEL, m)
            width = m - a
            block = np.matmul(unit[a:b], unit[a:].T, out=out[: (b - a) * width].reshape(b - a, width))
            flat = np.flatnonzero(np.greater_equal(block.reshape(-1), THRESHOLD, out=hit[: (b - a) * width]))
            r, c = np.divmod(flat, width)
            count += int(np.count_nonzero(c > r))
    return {"seconds": time.perf_counter() - started, "pairs": count}


def part_bare_tiles(
    texts: list[str], embeddings: list[np.ndarray | None], rows: np.ndarray
) -> dict[str, Any]:
    """The limit in 2-D tiles: 1,024 x 8,192 blocks of the upper triangle, threshold, count."""
    from memwork.similarity import _blas_threads, _threadpools

    unit = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    m, width = len(unit), 8192
    out = np.empty(PANEL * width, dtype=np.float32)
    hit = np.empty(PANEL * width, dtype=np.bool_)
    started = time.perf_counter()
    count = 0
    with _threadpools().limit(limits=_blas_threads(m), user_api="blas"):
        for a in range(0, m, PANEL):
            b = min(a + PANEL, m)
            for c0 in range(a, m, width):
                c1 = min(c0 + width, m)
                size = (b - a) * (c1 - c0)
                tile = np.matmul(unit[a:b], unit[c0:c1].T, out=out[:size].reshape(b - a, c1 - c0))
                flat = np.flatnonzero(np.greater_equal(tile.reshape(-1), THRESHOLD, out=hit[:size]))
                if c0 < b:
                    r, c = np.divmod(flat, c1 - c0)
                    count += int(np.count_nonzero(c + c0 > r + a))
                else:
                    count += len(flat)
    return {"seconds": time.perf_counter() - started, "pairs": count}


def part_cosine(texts: list[str], embeddings: list[np.ndarray | None], rows: np.ndarray) -> dict[str, Any]:
    from memwork import similarity

    n = len(embeddings)
    started = time.perf_counter()
    vectors = similarity._Vectors.build(embeddings)
    codes = similarity._kept(
        vectors.candidate_blocks(THRESHOLD, None),
        lambda i, j: vectors.cosine(i, j) >= THRESHOLD,
        n,
        lambda kept: None,
    )
    return {"seconds": time.perf_counter() - started, "pairs": len(codes)}


def part_find_duplicates(
    texts: list[str], embeddings: list[np.ndarray | None], rows: np.ndarray
) -> dict[str, Any]:
    from memwork.defrag import find_duplicates
    from memwork.entry import Entry

    entries = [
        Entry(path=f"bench/{k:07d}.md", content=t, embedding=e)
        for k, (t, e) in enumerate(zip(texts, embeddings, strict=True))
    ]
    started = time.perf_counter()
    pairs = find_duplicates(entries, THRESHOLD)
    return {"seconds": time.perf_counter() - started, "pairs": len(pairs)}


def part_jaccard(texts: list[str], embeddings: list[np.ndarray | None], rows: np.ndarray) -> dict[str, Any]:
    from memwork import similarity

    started = time.perf_counter()
    tokens = similarity._Tokens.build(texts)
    codes = similarity._kept(
        similarity._jaccard_candidates(tokens, THRESHOLD),
        lambda i, j: tokens.jaccard(i, j) >= THRESHOLD,
        len(texts),
        lambda kept: None,
    )
    return {"seconds": time.perf_counter() - started, "pairs": len(similarity._unique(codes))}


def part_setjoin(texts: list[str], embeddings: list[np.ndarray | None], rows: np.ndarray) -> dict[str, Any]:
    """AllPairs (Bayardo, Ma, Srikant 2007): records by size, tokens rarest first, probe prefix
    ``|x| - ceil(t|x|) + 1``, index prefix ``|x| - ceil(2t/(1+t)|x|) + 1``, length filter on the
    postings (sizes only grow, so a posting too short for ``x`` is too short for every later one)."""
    from memwork.similarity import tokenize

    t = THRESHOLD
    started = time.perf_counter()
    sets = [tokenize(text) for text in texts]
    freq = Counter(tok for s in sets for tok in s)
    rank = {tok: k for k, (tok, _) in enumerate(sorted(freq.items(), key=lambda kv: (kv[1], kv[0])))}
    ordered = [sorted(rank[tok] for tok in s) for s in sets]
    index: dict[int, list[int]] = {}
    start: dict[int, int] = {}
    found = 0
    for x in sorted(range(len(sets)), key=lambda k: (len(sets[k]), k)):
        size = len(sets[x])
        if size == 0:
            continue
        probe = size - math.ceil(t * size - 1e-9 * size) + 1
        candidates: set[int] = set()
        for tok in ordered[x][:probe]:
            postings = index.get(tok)
            if not postings:
                continue
            s = start.get(tok, 0)
            while s < len(postings) and len(sets[postings[s]]) < t * size - 1e-9 * size:
                s += 1
            start[tok] = s
            candidates.update(postings[s:])
        for y in candidates:
            inter = len(sets[x] & sets[y])
            if inter / (size + len(sets[y]) - inter) >= t:
                found += 1
        keep = size - math.ceil(2 * t / (1 + t) * size - 1e-9 * size) + 1
        for tok in ordered[x][:keep]:
            index.setdefault(tok, []).append(x)
    return {"seconds": time.perf_counter() - started, "pairs": found}


PARTS = {
    "bare": part_bare,
    "bare_tiles": part_bare_tiles,
    "cosine": part_cosine,
    "find_duplicates": part_find_duplicates,
    "jaccard": part_jaccard,
    "setjoin": part_setjoin,
}


def child(part: str, n: int, folder: Path) -> None:
    texts, embeddings, rows = load(n, folder)
    base = _rss_mb()
    result = PARTS[part](texts, embeddings, rows)
    result.update(part=part, n=n, base_mb=round(base), peak_mb=round(_peak_mb()))
    print(json.dumps(result))


def run(part: str, n: int, folder: Path) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    out = subprocess.run(
        [sys.executable, __file__, "--child", part, str(n), "--folder", str(folder)],
        check=True,
        capture_output=True,
        text=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["load"] = f"{load_before:.1f}->{os.getloadavg()[0]:.1f}"
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="20000,100000")
    parser.add_argument("--with-200k", action="store_true", help="also 200,000 entries (minutes)")
    parser.add_argument("--no-setjoin", action="store_true", help="skip the Jaccard comparison")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], int(args.child[1]), Path(args.folder))
        return 0
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()] + ([200_000] if args.with_200k else [])
    parts = ["bare", "bare_tiles", "cosine", "find_duplicates"] + (
        [] if args.no_setjoin else ["jaccard", "setjoin"]
    )
    missed = []
    with tempfile.TemporaryDirectory(prefix="mw-cosine-limit-") as tmp:
        for n in sizes:
            save(n, Path(tmp))
            got = {part: run(part, n, Path(tmp)) for part in parts}
            bare = min(got["bare"]["seconds"], got["bare_tiles"]["seconds"])
            print(f"N={n:,} (384-d, threshold {THRESHOLD}; load = 1-min average before->after each part)")
            for part, r in got.items():
                ratio = r["seconds"] / bare if part in ("cosine", "find_duplicates") else None
                target = TARGETS.get(part)
                verdict = ""
                if ratio is not None and target is not None:
                    verdict = f"  target <= {target}: {'ok' if ratio <= target else 'MISSED'}"
                    if ratio > target:
                        missed.append(f"{part} at {n}")
                extra = f"  x{ratio:.2f} of the faster bare" if ratio is not None else ""
                if part == "setjoin":
                    extra = f"  memwork jaccard / setjoin = {got['jaccard']['seconds'] / r['seconds']:.2f}"
                print(
                    f"  {part:<16} {r['seconds']:8.2f} s  pairs {r['pairs']:>7,}  peak {r['peak_mb']:>5} MB "
                    f"(base {r['base_mb']})  load {r['load']}{extra}{verdict}"
                )
            sys.stdout.flush()
    print("targets: " + ("all met" if not missed else "MISSED " + ", ".join(missed)))
    return 0 if not missed else 1


if __name__ == "__main__":
    sys.exit(main())
