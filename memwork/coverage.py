"""What an embedder can represent: a coverage score per text, the threshold, and the mark on entries.

An embedding model only means something on text it can read. all-MiniLM-L6-v2 is an English model: its
WordPiece vocabulary lacks most Chinese characters (they become ``[UNK]``) and spells Korean, Cyrillic
or kana out one character at a time, so unrelated texts in those scripts come out as nearly the same
vector (two Chinese memories about different subjects at cosine 1.0). Such a cosine must never decide a
duplicate or a related pair.

So every embedder answers :meth:`~memwork.embed.Embedder.coverage`: per text, the share (0-1) of its
letters, digits and symbols the model receives as real tokens. A vector whose text has a coverage
below :data:`MIN_COVERAGE` is *out of the model's range*.

Where the answer lives (decided here, no schema change anywhere):

* **entry stores** (the defrag's): *persisted*. The store records no model per vector, so the embedder
  that made a vector is the only one that can tell, and it is not known when the defrag later reads the
  store. Whoever embeds entries through memwork (:func:`embed_entries`: the samples, the defrag's
  re-embedding after a merge) marks an out-of-range vector with the bookkeeping metadata key
  :data:`MARK_KEY` = ``{"model": ..., "coverage": ...}`` and clears it otherwise; a vector dropped
  as stale loses the mark with it. Vectors written by other tools carry no mark and count as readable.
* **pgvector tables**: *recomputed*. Each row names its ``embedding_model``, so
  :func:`memwork.embed.coverage_for_model` (the embedders know their models) recomputes the score
  from the content with the model's own tokenizer when needed (tokenising is ~100x cheaper than
  embedding); nothing there pairs vectors by cosine today.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from memwork.similarity import NO_SPACE_CHARS

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from memwork.embed import Embedder
    from memwork.entry import Entry

#: Below this share of its text the model actually reads, a vector is out of the model's range.
#:
#: Measured with all-MiniLM-L6-v2 (``tests/test_coverage.py`` keeps these numbers honest): every
#: Chinese text the demo's templates can produce (all 1,176) has a coverage of at most 0.36 (median
#: 0.19), and unrelated ones among the demo's Chinese entries reach cosine 1.0 (300 of 2,211 pairs
#: >= 0.85, 210 of them with Jaccard < 0.5); every English demo text has 1.0. English sentences with
#: Chinese appended stay distinguishable down to a coverage of ~0.4 (unrelated pairs at cosine <= 0.54),
#: so at 0.5 -- "less than half of the text is read" -- a vector is set aside only when the unreadable
#: part dominates it, with a margin to the measured Chinese maximum. Being set aside only costs the
#: cosine signal: the text similarity (Jaccard over words and CJK bigrams) still applies.
MIN_COVERAGE = 0.5

#: entry metadata key marking a vector out of its model's range (bookkeeping, not user metadata)
MARK_KEY = "embedding_out_of_range"
#: entry metadata key marking a vector inside its model's range whose text the model did not read in
#: full (coverage below 1.0): two such texts may differ only in the part the model cannot read, so a
#: cosine between them decides a pair only when the *differing* parts are readable (:func:`pair_readable`)
PARTLY_READ_KEY = "embedding_partly_read"
#: every coverage mark: they describe the vector, so they go with it (dropped, never merged)
MARK_KEYS = (MARK_KEY, PARTLY_READ_KEY)


#: what :func:`differing_parts` compares: a character of an unspaced script, a word, or a symbol
_WORDS = re.compile(f"[{NO_SPACE_CHARS}]|[^\\W{NO_SPACE_CHARS}]+|[^\\w\\s]")


def in_range(coverage: float) -> bool:
    """True when a text with this coverage is inside the model's range."""
    return coverage >= MIN_COVERAGE


# ---- the score of a WordPiece model -------------------------------------------------------------
def _is_punctuation(char: str) -> bool:
    """Punctuation carries no meaning of its own either way: it counts neither as read nor as missed."""
    return unicodedata.category(char).startswith("P")


def wordpiece_coverage(tokenizer: Tokenizer, texts: Sequence[str]) -> np.ndarray:
    """Per text, the share of its characters the model reads as real tokens (float64, 0-1).

    A character is *read* when a token other than ``[UNK]`` covers it and that token is not a
    single-character piece of a longer word: BERT's vocabulary spells Korean jamo, Cyrillic or kana out
    letter by letter, and the model learned no meaning for such pieces (unrelated Korean sentences
    measured at cosine 0.91 with no ``[UNK]`` at all). Characters of no token (spaces, controls) and
    punctuation tokens are not counted; a text with nothing countable has coverage 1.0 (nothing is
    missing). ``tokenizer`` must neither pad nor truncate: the whole text is scored.
    """
    unknown = _unknown_token(tokenizer)
    encodings = tokenizer.encode_batch([str(t) for t in texts], add_special_tokens=False)
    scores = (
        _one_coverage(str(text), e.tokens, e.offsets, e.word_ids, unknown)
        for text, e in zip(texts, encodings, strict=True)
    )
    return np.fromiter(scores, dtype=np.float64, count=len(texts))


def _unknown_token(tokenizer: Tokenizer) -> str:
    return str(getattr(tokenizer.model, "unk_token", None) or "[UNK]")


def _one_coverage(
    text: str,
    tokens: Sequence[str],
    offsets: Sequence[tuple[int, int]],
    word_ids: Sequence[int | None],
    unknown: str,
) -> float:
    pieces = Counter(word_ids)
    marks = bytearray(len(text))  # 1: counted, 2: counted and read
    read: list[tuple[int, int]] = []
    for token, (start, end), word in zip(tokens, offsets, word_ids, strict=True):
        if end <= start or (end - start == 1 and _is_punctuation(text[start])):
            continue
        marks[start:end] = b"\x01" * (end - start)
        fragment = end - start == 1 and pieces[word] > 1
        if token != unknown and not fragment:
            read.append((start, end))
    for start, end in read:
        marks[start:end] = b"\x02" * (end - start)
    counted = len(marks) - marks.count(0)
    return marks.count(2) / counted if counted else 1.0


@lru_cache(maxsize=4)
def tokenizer_for_coverage(path: str) -> Tokenizer:
    """A tokenizer from ``tokenizer.json`` that neither pads nor truncates (its own instance: the
    embedding runtime's truncates at the model's sequence length)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(path)
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def full_coverage(texts: Sequence[str]) -> np.ndarray:
    """Coverage 1.0 for every text: the answer of embedders that read anything (hash, modules by default)."""
    return np.ones(len(texts), dtype=np.float64)


def coverage_of(embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
    """``embedder.coverage(texts)``, checked: one finite score in 0..1 per text. An object that predates
    the protocol's ``coverage`` (a duck-typed embedder) reads everything."""
    from memwork.errors import UsageError

    method = getattr(embedder, "coverage", None)
    if not callable(method):
        return full_coverage(texts)
    try:
        scores = np.asarray(method(texts), dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise UsageError("embedder", embedder.model_id, "coverage() must return numbers") from None
    if scores.size != len(texts) or not np.all(np.isfinite(scores)) or np.any((scores < 0) | (scores > 1)):
        problem = f"coverage() must return one number from 0 to 1 per text ({len(texts)})"
        raise UsageError("embedder", embedder.model_id, problem)
    return scores


# ---- the mark on entries ------------------------------------------------------------------------
def mark(entry: Entry, model_id: str, coverage: float) -> None:
    """Record whether ``entry``'s new vector (made by ``model_id``) is out of that model's range, or
    inside it with part of the text unread."""
    for key in MARK_KEYS:
        entry.metadata.pop(key, None)
    if coverage < 1.0:
        key = PARTLY_READ_KEY if in_range(coverage) else MARK_KEY
        entry.metadata[key] = {"model": model_id, "coverage": round(float(coverage), 3)}


def embed_entries(embedder: Embedder, entries: Sequence[Entry]) -> None:
    """Embed ``entries`` (their content) in one batch, each vector marked in or out of range."""
    if not entries:
        return
    texts = [e.content for e in entries]
    vectors = np.asarray(embedder.embed(texts), dtype=np.float32)
    attach_vectors(embedder.model_id, entries, vectors, coverage_of(embedder, texts))


def attach_vectors(model_id: str, entries: Sequence[Entry], vectors: np.ndarray, scores: np.ndarray) -> None:
    """Give each entry its vector (made by ``model_id``), marked by its coverage score."""
    for entry, vector, score in zip(entries, vectors, scores, strict=True):
        entry.embedding = vector
        mark(entry, model_id, float(score))


def out_of_range(entry: Entry) -> bool:
    """True when ``entry`` has a vector marked out of its model's range."""
    return entry.embedding is not None and bool(entry.metadata.get(MARK_KEY))


def drop_marks(entry: Entry) -> None:
    """Forget the coverage marks of ``entry``'s vector (the vector was dropped)."""
    for key in MARK_KEYS:
        entry.metadata.pop(key, None)


def _partly_read_model(entry: Entry) -> str | None:
    value = entry.metadata.get(PARTLY_READ_KEY)
    return str(value.get("model") or "") if isinstance(value, dict) else None


def differing_parts(a: str, b: str) -> tuple[str, str]:
    """The words of ``a`` and of ``b`` outside their longest common runs of words, each side joined by
    spaces (difflib over ``\\w+`` words, single symbols, and single characters of scripts written
    without spaces, where a "word" would be a whole sentence)."""
    import difflib

    words_a, words_b = _WORDS.findall(a), _WORDS.findall(b)
    matcher = difflib.SequenceMatcher(None, words_a, words_b, autojunk=False)
    parts_a: list[str] = []
    parts_b: list[str] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            parts_a.extend(words_a[i1:i2])
            parts_b.extend(words_b[j1:j2])
    return " ".join(parts_a), " ".join(parts_b)


def pair_readable(
    a: Entry, b: Entry, score: Callable[[str | None, Sequence[str]], np.ndarray | None]
) -> bool:
    """True when a cosine between ``a`` and ``b`` may decide: the model read what tells them apart.

    A long shared English sentence with a different Chinese name at the end reads 90% and sits inside
    the model's range, yet the two vectors are the same sentence to the model (cosine ~1.0). So when
    either vector is partly read, the parts where the texts differ are scored with that model's
    tokenizer (``score``: :func:`memwork.embed.coverage_for_model`, which answers None for a model it
    cannot score); each non-empty part must be in range. A model memwork cannot score is not trusted:
    the pair is compared by text only.
    """
    models = {m for m in (_partly_read_model(a), _partly_read_model(b)) if m is not None}
    if not models:
        return True
    parts = [p for p in differing_parts(a.content, b.content) if p.strip()]
    if not parts:
        return True
    for model in models:
        scores = score(model or None, parts)
        if scores is None or not all(in_range(float(s)) for s in scores):
            return False
    return True


def pairs_readable(
    pairs: Sequence[tuple[Entry, Entry]], score: Callable[[str | None, Sequence[str]], np.ndarray | None]
) -> list[bool]:
    """:func:`pair_readable` of many pairs, with one ``score`` call per model instead of one per pair
    (a tokenizer call costs far more than the text it reads: 50,000 sampled pairs of partly read
    entries took 15 s one by one)."""
    out = [True] * len(pairs)
    asked: dict[str, list[tuple[int, list[str]]]] = {}
    for k, (a, b) in enumerate(pairs):
        models = {m for m in (_partly_read_model(a), _partly_read_model(b)) if m is not None}
        if not models:
            continue
        parts = [p for p in differing_parts(a.content, b.content) if p.strip()]
        for model in models if parts else ():
            asked.setdefault(model, []).append((k, parts))
    for model, items in asked.items():
        scores = score(model or None, [part for _, parts in items for part in parts])
        at = 0
        for k, parts in items:
            if scores is None or not all(in_range(float(s)) for s in scores[at : at + len(parts)]):
                out[k] = False
            at += len(parts)
    return out


def count_out_of_range(entries: Iterable[Entry]) -> int:
    """Non-stub entries whose vector is out of its model's range (what the reports show)."""
    return sum(1 for e in entries if not e.is_stub and out_of_range(e))


def describe(mark_value: Any) -> str:
    """One phrase for a mark: ``"all-MiniLM-L6-v2 reads 19% of it"``."""
    if isinstance(mark_value, dict) and isinstance(mark_value.get("coverage"), int | float):
        return f"{mark_value.get('model') or 'the model'} reads {mark_value['coverage']:.0%} of it"
    return "out of the model's range"
