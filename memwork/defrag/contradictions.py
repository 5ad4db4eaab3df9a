"""Possible contradictions between two alike entries: rule-based and explainable, so never merged.

Two entries of a pair in the duplicate or related band may state opposite facts: a negation on one
side only ("allergic to peanuts" / "not allergic to peanuts"), another number ("is 34" / "is 35"),
another date ("moved in 2019" / "moved in 2021") or a changed value of the same attribute ("lives in
Ghent" / "lives in Leeds"). Merging such a pair keeps one fact and hides the other, so
:func:`detect` flags it with its kind and the differing tokens, and the merge planners skip it
(``memwork defrag supersede`` then marks the older one superseded). No model is involved: every
flag can be checked by a person against these rules.

1. **Normalise** both texts: NFKC, lower case; contractions expanded (``isn't`` -> ``is not``,
   ``can't`` -> ``can not``); dates to ISO tokens (``5 March 2024``, ``March 5th, 2024`` and
   ``2024-03-05`` are all ``2024-03-05``; a lone year 1900-2099 and a weekday are dates too);
   clock times to ``HH:MM`` (``3 pm`` = ``15:00``); number words (``thirty-four``) and digit
   groups (``1,000``) to plain numbers; words to a crude stem (``lives``/``lived`` -> ``liv``) and
   listed synonyms (:data:`SYNONYMS`) to one word. Articles and filler words (:data:`FILLER`) go.
2. Texts with the same tokens in any order are **consistent** (a reordering).
3. **Negation**: the texts differ in how many negation words (:data:`NEGATIONS`) they hold, and a
   differing span (``difflib`` opcodes, auxiliaries such as *is*/*does* ignored) holds nothing but
   negation words -- or one word is the other with a negating prefix (*likes* / *dislikes*). A
   negation inside added words ("likes coffee" / "likes coffee but not decaf") is added detail.
4. **Number / date**: one replaced span holds numbers (dates) on both sides that differ, the rest of
   the span being equal ("has 2 cats" / "has 3 cats"; not "has 2 cats" / "has 3 dogs").
5. **Value** (texts of at most :data:`VALUE_RULE_MAX_TOKENS` tokens): exactly one replaced span
   with 1-3 content words per side, sharing no stem, after at least two equal tokens of the same
   attribute (``user is``, ``lives in``) and no fewer equal tokens before it than after (a changed
   subject, "Alice lives in Ghent" / "Bob lives in Ghent", is not a contradiction), right after an
   anchor as written -- a copula, a preposition, a title or a verb form (``prefers``, ``called``)
   -- so "batch job alpha" / "batch job beta" name two things; a value after a
   many-valued verb (:data:`MANY_VALUED`: *likes*, *has*, *speaks* ...) is another value, not a
   changed one; nor is a spelling fix (the spans' letters alike).
6. Words only one side has (inserted or deleted spans) are **added detail**, never a contradiction.

A one-digit edit or transposition in an identifier (``PIN 1234`` / ``PIN 1243``, a postcode typed
wrong) is a changed number like any other, on purpose: the rule cannot tell a typo from a real change,
and in an agent's memory the change may be real. A false flag costs a merge (the pair stays listed, for
``supersede`` or a person); a false merge hides a fact. On record-like data full of typo'd numbers
(FEBRL) most flags are therefore false ones (``benchmarks/README.md`` states the rate).

Measured on ``tests/data/contradictions.csv`` (written alongside these rules, see its README line)
by ``tests/test_contradictions.py``.
"""

from __future__ import annotations

import difflib
import functools
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["negation", "number", "date", "value"]
KINDS: tuple[str, ...] = ("negation", "number", "date", "value")

#: words that negate what they stand next to (``no longer`` counts once: ``longer`` is filler after it)
NEGATIONS = frozenset({"not", "no", "never", "none", "nobody", "nothing", "neither", "nor", "without"})
#: auxiliaries and copulas: ignored when aligning a negation ("likes" / "does not like")
AUXILIARIES = frozenset(
    [
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "am",
        "do",
        "does",
        "did",
        "has",
        "have",
        "had",
        "will",
        "would",
        "can",
        "could",
        "shall",
        "should",
        "may",
        "might",
        "must",
    ]
)
#: articles, determiners and adverbs that change no fact
FILLER = frozenset(
    [
        "a",
        "an",
        "the",
        "some",
        "any",
        "each",
        "every",
        "all",
        "also",
        "still",
        "now",
        "currently",
        "just",
        "really",
        "very",
        "always",
        "usually",
        "anymore",
        "longer",
        "actually",
        "definitely",
        "indeed",
        "so",
        "quite",
        "too",
    ]
)
#: verbs whose object is one of many values: a different one adds a value, it does not replace one
MANY_VALUED = frozenset(
    [
        "like",
        "love",
        "enjoy",
        "have",
        "own",
        "speak",
        "visit",
        "play",
        "eat",
        "read",
        "watch",
        "know",
        "collect",
        "use",
        "want",
        "need",
        "follow",
        "listen",
        "cook",
        "hate",
        "dislike",
        "meet",
        "study",
        "write",
        "drink",
        "keep",
    ]
)
_NEGATING_PREFIXES = ("dis", "un", "non", "in", "im", "il", "ir")
#: groups of interchangeable words (after stemming each is replaced by the group's first word)
SYNONYMS: tuple[tuple[str, ...], ...] = (
    ("live", "reside", "dwell"),
    ("like", "enjoy", "love", "fond"),
    ("work", "employ"),
    ("big", "large", "huge"),
    ("small", "little", "tiny"),
    ("start", "begin", "commence"),
    ("buy", "purchase"),
    ("car", "automobile", "vehicle"),
    ("phone", "mobile", "cellphone"),
    ("home", "house"),
    ("fast", "quick", "rapid"),
    ("prefer", "favour", "favor"),
    ("favourite", "favorite"),
    ("colour", "color"),
    ("mother", "mom", "mum"),
    ("father", "dad"),
    ("child", "kid"),
    ("movie", "film"),
    ("doctor", "physician", "gp"),
    ("happy", "glad", "content"),
    ("sofa", "couch"),
    ("tv", "television"),
    ("email", "mail"),
    ("job", "occupation", "profession"),
    ("wife", "spouse", "partner", "husband"),
    ("talk", "speak"),
    ("get", "receive", "obtain"),
    ("help", "assist"),
    ("need", "require"),
    ("try", "attempt"),
    ("end", "finish"),
    ("show", "display"),
    ("often", "frequently"),
    ("hard", "difficult"),
    ("easy", "simple"),
    ("pet", "animal"),
    ("jog", "run"),
    ("trip", "journey", "travel"),
    ("centre", "center"),
    ("reliable", "dependable", "trustworthy"),
    ("organise", "organize"),
    ("euro", "eur"),
    ("dollar", "usd"),
    ("kilometre", "kilometer", "km"),
    ("kilogram", "kilo", "kg"),
)
#: titles before a name: the name after one is a value (``Dr Patel`` / ``Dr Okafor``)
TITLES = frozenset(["dr", "mr", "mrs", "ms", "prof"])
#: a span of these alone changes the phrasing, not a value ("happy with" / "glad about")
PREPOSITIONS = frozenset(
    [
        "with",
        "about",
        "in",
        "on",
        "at",
        "to",
        "for",
        "from",
        "of",
        "by",
        "into",
        "onto",
        "over",
        "under",
        "near",
        "around",
        "since",
        "until",
    ]
)
_NUMBER_WORDS = {
    w: n
    for n, w in enumerate(
        [
            "zero",
            "one",
            "two",
            "three",
            "four",
            "five",
            "six",
            "seven",
            "eight",
            "nine",
            "ten",
            "eleven",
            "twelve",
            "thirteen",
            "fourteen",
            "fifteen",
            "sixteen",
            "seventeen",
            "eighteen",
            "nineteen",
        ]
    )
}
_TENS = {
    w: 10 * (k + 2)
    for k, w in enumerate(["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"])
}
_MONTHS = {
    name: k + 1
    for k, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ]
    )
    for name in names
}
_WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_CONTRACTIONS = (
    (re.compile(r"\bcan[’']t\b"), "can not"),
    (re.compile(r"\bcannot\b"), "can not"),
    (re.compile(r"\bwon[’']t\b"), "will not"),
    (re.compile(r"\bshan[’']t\b"), "shall not"),
    (re.compile(r"n[’']t\b"), " not"),
    (re.compile(r"[’']s\b"), " s"),
    (re.compile(r"[’'](re|ve|ll|d|m)\b"), r" \1"),
)
_MONTH_RE = "|".join(sorted(_MONTHS, key=len, reverse=True))
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_DATE_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b"), "ymd"),
    (re.compile(rf"\b{_DAY}\s+(?:of\s+)?({_MONTH_RE})\.?,?(?:\s+(\d{{4}}))?\b"), "dmy"),
    (re.compile(rf"\b({_MONTH_RE})\.?\s+{_DAY}\b,?(?:\s+(\d{{4}}))?"), "mdy"),
    (re.compile(rf"\b({_MONTH_RE})\.?,?\s+(\d{{4}})\b"), "my"),
)
_TIME_RE = re.compile(r"\b(\d{1,2})(?::(\d{2}))?\s*(am|pm|a\.m\.|p\.m\.)(?=\W|$)|\b(\d{1,2}):(\d{2})\b")
_TOKEN_RE = re.compile(r"date:[\d-]+|time:\d\d:\d\d|\d+\.\d+[a-z]*|[^\W_]+|%")
#: a number with a short unit glued on (``34kg``, ``5km``) is split; other mixes (``v2``, ``ipv6``) are words
_NUMBER_UNIT_RE = re.compile(r"(\d+(?:\.\d+)?)([a-z]{1,3})")
#: the value rule is for facts, not documents: texts longer than this many tokens are not checked by it
VALUE_RULE_MAX_TOKENS = 40


@dataclass(frozen=True)
class Contradiction:
    """Why two texts may contradict: the rule's kind, the differing tokens of each side, a sentence."""

    kind: Kind
    tokens_a: tuple[str, ...]
    tokens_b: tuple[str, ...]

    @property
    def reason(self) -> str:
        a, b = " ".join(self.tokens_a) or "-", " ".join(self.tokens_b) or "-"
        return f"{self.kind}: {a!r} vs {b!r}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "a": list(self.tokens_a),
            "b": list(self.tokens_b),
            "reason": self.reason,
        }


# ---- normalisation ----------------------------------------------------------------------------------
def _iso_date(match: re.Match[str], shape: str) -> str:
    groups = match.groups()
    if shape == "ymd":
        year, month, day = int(groups[0]), int(groups[1]), int(groups[2])
    elif shape == "dmy":
        day, month, year = int(groups[0]), _MONTHS[groups[1]], int(groups[2] or 0)
    elif shape == "mdy":
        month, day, year = _MONTHS[groups[0]], int(groups[1]), int(groups[2] or 0)
    else:
        month, year, day = _MONTHS[groups[0]], int(groups[1]), 0
    parts = [f"{year:04d}" if year else "", f"{month:02d}", f"{day:02d}" if day else ""]
    return " date:" + "-".join(p for p in parts if p) + " "


def _clock(match: re.Match[str]) -> str:
    hour_s, minute_s, half, hour24, minute24 = match.groups()
    if hour24 is not None:
        hour, minute = int(hour24), int(minute24)
    else:
        hour, minute = int(hour_s) % 12, int(minute_s or 0)
        hour += 12 if half.startswith("p") else 0
    if hour > 23 or minute > 59:
        return match.group(0)
    return f" time:{hour:02d}:{minute:02d} "


def _combine_numbers(words: list[str]) -> list[str]:
    """Number words to digits: ``thirty four`` -> ``34``, ``two`` -> ``2``."""
    out: list[str] = []
    k = 0
    while k < len(words):
        word = words[k]
        if word in _TENS:
            value = _TENS[word]
            if k + 1 < len(words) and words[k + 1] in _NUMBER_WORDS and 0 < _NUMBER_WORDS[words[k + 1]] < 10:
                value += _NUMBER_WORDS[words[k + 1]]
                k += 1
            out.append(str(value))
        elif word in _NUMBER_WORDS:
            out.append(str(_NUMBER_WORDS[word]))
        else:
            out.append(word)
        k += 1
    return out


def stem(word: str) -> str:
    """A crude stem (plural, third person, past, gerund, final e) so ``lives``/``lived`` compare equal."""
    if not word.isalpha() or len(word) <= 3:
        return word
    for suffix in ("ies", "ied"):
        if word.endswith(suffix) and len(word) > 4:
            return word[:-3] + "y"
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and not word.endswith("ss") and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            if suffix in ("ing", "ed") and len(word) > 3 and word[-1] == word[-2] and word[-1] not in "ls":
                word = word[:-1]  # jogging -> jog, stopped -> stop
            break
    return word[:-1] if word.endswith("e") and len(word) > 3 else word


_CANON = {stem(word): group[0] for group in SYNONYMS for word in group}
_MANY = frozenset(_CANON.get(stem(w), stem(w)) for w in MANY_VALUED) | {"has", "have", "had"}
_COPULAS = frozenset(["is", "are", "was", "were", "be", "been", "being", "am", "do", "does", "did"])


def _canon(word: str) -> str:
    s = stem(word)
    return _CANON.get(s, s)


def tokens(text: str) -> list[str]:
    """The normalised token sequence of ``text`` (rule 1), filler words dropped."""
    return [token for token, _ in _tokens(text)]


@functools.lru_cache(maxsize=65_536)
def _tokens(text: str) -> tuple[tuple[str, str], ...]:
    """Each normalised token with the word it came from (the value rule's anchor looks at that);
    cached, as one entry is in many pairs."""
    text = unicodedata.normalize("NFKC", text).lower()
    for pattern, repl in _CONTRACTIONS:
        text = pattern.sub(repl, text)
    for pattern, shape in _DATE_PATTERNS:
        text = pattern.sub(lambda m, s=shape: _iso_date(m, s), text)  # type: ignore[misc]
    text = _TIME_RE.sub(_clock, text)
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)  # 1,000 -> 1000
    text = re.sub(r"(?<=[a-z])-(?=[a-z])", " ", text)  # thirty-four, e-mail
    split: list[str] = []
    for token in _TOKEN_RE.findall(text):
        unit = _NUMBER_UNIT_RE.fullmatch(token)
        split.extend(unit.groups() if unit else (token,))
    raw = _combine_numbers(split)
    out: list[tuple[str, str]] = []
    for original in raw:
        word = original
        if word in FILLER:
            continue
        if word == "%":
            word = "percent"
        elif re.fullmatch(r"\d+\.\d+", word):
            word = str(float(word))
        elif re.fullmatch(r"(19|20)\d\d", word):
            word = f"date:{word}"
        elif word in _WEEKDAYS or word.rstrip("s") in _WEEKDAYS:
            word = f"date:{word.rstrip('s')}"
        elif word.isalpha() and word not in NEGATIONS and word not in AUXILIARIES:
            stemmed = _canon(word)
            # a stem must not become a negation or an auxiliary ("note" -> "not", "wasp" -> "was")
            word = word if stemmed in NEGATIONS or stemmed in AUXILIARIES else stemmed
        out.append((word, original))
    return tuple(out)


def _anchor(word: str) -> bool:
    """Can a value follow ``word`` (as it was written)? A copula or auxiliary, a preposition, a title,
    or a verb form: third person (``prefers``, ``drives``) or participle (``called``, ``named``)."""
    if word in _COPULAS or word in PREPOSITIONS or word in TITLES:
        return True
    return (
        word.isalpha()
        and len(word) > 3
        and (word.endswith("ed") or (word.endswith("s") and not word.endswith("ss")))
    )


def _kind_of(token: str) -> str:
    if token.startswith(("date:", "time:")):
        return "date"
    if re.fullmatch(r"\d+(?:\.\d+)?", token):
        return "number"
    return "word"


# ---- the rules ----------------------------------------------------------------------------------------
def _negated_prefix(a: Sequence[str], b: Sequence[str]) -> bool:
    """One word is the other with a negating prefix (``dislike`` / ``like``, ``unhappy`` / ``happy``)."""
    if len(a) != 1 or len(b) != 1:
        return False
    x, y = a[0].rstrip("e"), b[0].rstrip("e")
    return any((x == p + y or y == p + x) and min(len(x), len(y)) >= 3 for p in _NEGATING_PREFIXES)


def _negation(ta: list[str], tb: list[str]) -> Contradiction | None:
    a = [t for t in ta if t not in AUXILIARIES]
    b = [t for t in tb if t not in AUXILIARIES]
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        sa, sb = a[i1:i2], b[j1:j2]
        if _negated_prefix(sa, sb):
            return Contradiction("negation", tuple(sa), tuple(sb))
        na, nb = [t for t in sa if t in NEGATIONS], [t for t in sb if t in NEGATIONS]
        rest_a, rest_b = [t for t in sa if t not in NEGATIONS], [t for t in sb if t not in NEGATIONS]
        if len(na) != len(nb) and rest_a == rest_b:
            return Contradiction("negation", tuple(sa), tuple(sb))
    return None


def _replaced(ta: list[str], tb: list[str]) -> list[tuple[int, int, int, int]]:
    ops = difflib.SequenceMatcher(a=ta, b=tb, autojunk=False).get_opcodes()
    return [(i1, i2, j1, j2) for tag, i1, i2, j1, j2 in ops if tag == "replace"]


Spans = list[tuple[int, int, int, int]]


def _numbers(ta: list[str], tb: list[str], spans: Spans) -> Contradiction | None:
    for i1, i2, j1, j2 in spans:
        sa, sb = ta[i1:i2], tb[j1:j2]
        for kind in ("date", "number"):
            va, vb = [t for t in sa if _kind_of(t) == kind], [t for t in sb if _kind_of(t) == kind]
            rest_a, rest_b = [t for t in sa if _kind_of(t) != kind], [t for t in sb if _kind_of(t) != kind]
            if va and vb and Counter(va) != Counter(vb) and rest_a == rest_b:
                return Contradiction(kind, tuple(va), tuple(vb))
    return None


def _value(ta: list[str], tb: list[str], spans: Spans, written: list[str]) -> Contradiction | None:
    if len(spans) != 1 or max(len(ta), len(tb)) > VALUE_RULE_MAX_TOKENS:
        return None
    i1, i2, j1, j2 = spans[0]
    sa, sb = ta[i1:i2], tb[j1:j2]
    if not (1 <= len(sa) <= 3 and 1 <= len(sb) <= 3) or set(sa) & set(sb):
        return None
    if any(t in NEGATIONS or t in AUXILIARIES for t in (*sa, *sb)):
        return None
    if all(t in PREPOSITIONS for t in sa) and all(t in PREPOSITIONS for t in sb):
        return None
    if difflib.SequenceMatcher(a=" ".join(sa), b=" ".join(sb)).ratio() >= 0.8 or sorted(
        "".join(sa)
    ) == sorted("".join(sb)):
        return None  # a spelling fix (``recieve`` / ``receive``, ``teh`` / ``the``), not another value
    before, after = ta[:i1], ta[i2:]
    if len(before) < 2 or len(before) < len(after) or tb[:j1] != before:
        return None
    if not _anchor(written[i1 - 1]):
        return None  # not in a value's place ("batch job alpha" / "batch job beta" name two jobs)
    verbs = [t for t in before if t not in _COPULAS and _kind_of(t) == "word"]
    if any(t in _MANY for t in verbs[-2:]):
        return None  # another value of a many-valued attribute, not a changed one
    return Contradiction("value", tuple(sa), tuple(sb))


def detect(text_a: str, text_b: str) -> Contradiction | None:
    """The possible contradiction between two texts (module docstring rules 1-6), or None."""
    pa, pb = _tokens(text_a), _tokens(text_b)
    ta, tb = [t for t, _ in pa], [t for t, _ in pb]
    if ta == tb or Counter(ta) == Counter(tb):
        return None
    negation = _negation(ta, tb)
    if negation is not None:
        return negation
    spans = _replaced(ta, tb)
    return _numbers(ta, tb, spans) or _value(ta, tb, spans, [w for _, w in pa])
