"""The default memory extractor: deterministic rules for first-person statements, English and Chinese.

An extractor is any callable ``messages -> iterable of ExtractedItem (or dicts of the same keys)``;
pass your own (e.g. one calling an LLM) to the legacy backend. The rules here only read ``user``
messages, skip questions and keep the user's own wording as the item's content. ``metadata.key``
names the slot a statement fills (``name``, ``location``, ``preference:coffee``...): a newer item
with the same key supersedes the older one during compaction.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

EXTRACTOR_ID = "rules-v1"
CONFIDENCE = {"profile": 0.8, "preference": 0.7, "goal": 0.7, "fact": 0.6}

Extractor = Callable[[Sequence[Mapping[str, Any]]], Iterable[Any]]


@dataclass(frozen=True)
class ExtractedItem:
    """One candidate memory; ``source_index`` is the position of its message in the input."""

    content: str
    type: str
    confidence: float = 0.5
    key: str | None = None
    value: str | None = None
    source_index: int | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str]
    type: str
    key: str | None = None  # fixed key; "{k}" uses the named group k; "pref:" keys use the value
    polarity: str | None = None


_EN_LEAD = r"^(?:(?:also|actually|and|but|so|well|oh|btw|by the way|honestly)[,\s]+)*"
_ZH_LEAD = r"^(?:其实|另外|还有|对了|顺便说一下|而且|但是)?[，,\s]*"
_OCCUPATIONS = (
    "engineer|developer|designer|teacher|student|doctor|nurse|manager|scientist|writer|researcher|"
    "lawyer|artist|programmer|accountant|consultant|founder|analyst|architect"
)


def _en(body: str) -> re.Pattern[str]:
    return re.compile(_EN_LEAD + body, re.IGNORECASE)


def _zh(body: str) -> re.Pattern[str]:
    return re.compile(_ZH_LEAD + body)


RULES: tuple[Rule, ...] = (
    # English: profile
    Rule(_en(r"my name is (?P<v>[\w .'-]{1,60})$"), "profile", "name"),
    Rule(_en(r"(?:call me|i am called|i'm called) (?P<v>[\w .'-]{1,60})$"), "profile", "name"),
    Rule(_en(r"(?:i am|i'm) (?P<v>\d{1,3}) years? old$"), "profile", "age"),
    Rule(_en(r"i (?:live|am living|'m living) in (?P<v>.{2,80})$"), "profile", "location"),
    Rule(_en(r"(?:i am|i'm|i come) from (?P<v>.{2,80})$"), "profile", "hometown"),
    Rule(_en(r"i work (?:at|for) (?P<v>.{2,80})$"), "profile", "employer"),
    Rule(
        _en(r"(?:i work as|my (?:job|profession|occupation) is) (?:an? )?(?P<v>.{2,80})$"),
        "profile",
        "occupation",
    ),
    Rule(_en(rf"(?:i am|i'm) an? (?P<v>[\w -]{{0,40}}(?:{_OCCUPATIONS}))$"), "profile", "occupation"),
    # English: goals
    Rule(
        _en(
            r"(?:my goal is to|i want to|i'd like to|i would like to|i plan to|i'm planning to|"
            r"i am planning to|i hope to|i'm trying to|i am trying to|i intend to|i aim to|"
            r"i'm going to|i am going to) (?P<v>.{2,200})$"
        ),
        "goal",
    ),
    # English: preferences
    Rule(_en(r"my fav(?:ou|o)rite (?P<k>[\w ]{1,30}?) is (?P<v>.{1,120})$"), "preference", "favorite:{k}"),
    Rule(
        _en(r"i (?:really )?(?:don't|do not|dont) (?:like|enjoy|love) (?P<v>.{1,120})$"),
        "preference",
        "pref:",
        "negative",
    ),
    Rule(
        _en(r"i (?:really )?(?:hate|dislike|can't stand|cannot stand) (?P<v>.{1,120})$"),
        "preference",
        "pref:",
        "negative",
    ),
    Rule(
        _en(r"i (?:really |absolutely |much )?(?:like|love|enjoy|prefer|adore) (?P<v>.{1,120})$"),
        "preference",
        "pref:",
        "positive",
    ),
    # English: facts
    Rule(_en(r"(?:i am|i'm) allergic to (?P<v>.{1,80})$"), "fact", "allergy"),
    Rule(_en(r"my (?P<k>[\w ]{1,30}?) is (?P<v>.{1,120})$"), "fact", "my:{k}"),
    Rule(_en(r"i (?:have|own|use|speak|am using|'m using) (?P<v>.{2,120})$"), "fact"),
    # Chinese: profile
    Rule(_zh(r"我(?:的名字)?叫(?P<v>.{1,20})$"), "profile", "name"),
    Rule(_zh(r"我的名字是(?P<v>.{1,20})$"), "profile", "name"),
    Rule(_zh(r"我今年(?P<v>\d{1,3})岁$"), "profile", "age"),
    Rule(_zh(r"我(?:现在)?住在(?P<v>.{1,40})$"), "profile", "location"),
    Rule(_zh(r"我来自(?P<v>.{1,40})$"), "profile", "hometown"),
    Rule(_zh(r"我是(?P<v>.{1,10})人$"), "profile", "hometown"),
    Rule(_zh(r"我在(?P<v>.{1,40}?)(?:工作|上班)$"), "profile", "employer"),
    Rule(_zh(r"(?:我的职业是|我的工作是|我是一名|我是一位)(?P<v>.{1,40})$"), "profile", "occupation"),
    # Chinese: goals
    Rule(_zh(r"(?:我的目标是|我打算|我计划|我希望|我想要|我准备|我想|我要)(?P<v>.{2,200})$"), "goal"),
    # Chinese: preferences (negative before positive)
    Rule(_zh(r"我最喜欢的(?P<k>.{1,10}?)是(?P<v>.{1,60})$"), "preference", "favorite:{k}"),
    Rule(_zh(r"我(?:很|真的|非常)?(?:不喜欢|讨厌|不爱)(?P<v>.{1,60})$"), "preference", "pref:", "negative"),
    Rule(
        _zh(r"我(?:很|非常|特别|真的|更)?(?:喜欢|热爱|偏好|爱)(?P<v>.{1,60})$"),
        "preference",
        "pref:",
        "positive",
    ),
    # Chinese: facts
    Rule(_zh(r"我的(?P<k>.{1,10}?)是(?P<v>.{1,60})$"), "fact", "my:{k}"),
    Rule(_zh(r"我(?:有|养了|在用|会说)(?P<v>.{1,60})$"), "fact"),
)

_SENTENCE_SPLIT = re.compile(r"(?<=[.!?。！？；;])\s*|\n+")
_TRAILING = " \t.,!;:。，！；：~…"
_QUESTION_START = re.compile(
    r"^(?:what|why|how|when|where|who|which|do|does|did|can|could|should|is|are)\b", re.I
)


def sentences(text: str) -> list[str]:
    """Sentence-ish pieces of ``text`` (English and Chinese end punctuation, line breaks)."""
    return [piece.strip() for piece in _SENTENCE_SPLIT.split(text) if piece and piece.strip()]


def _is_question(sentence: str) -> bool:
    return sentence.endswith(("?", "？", "吗")) or bool(_QUESTION_START.match(sentence))


def _key(rule: Rule, match: re.Match[str], value: str) -> str | None:
    if rule.key is None:
        return None
    if rule.key == "pref:":
        return f"pref:{value.lower()}"
    if "{k}" in rule.key:
        return rule.key.replace("{k}", match.group("k").strip().lower())
    return rule.key


def extract_sentence(sentence: str, index: int | None = None) -> ExtractedItem | None:
    """The first rule matching ``sentence`` as an item, or None."""
    sentence = sentence.strip().rstrip(_TRAILING)
    if len(sentence) < 2 or _is_question(sentence) or sentence.lower().startswith("if "):
        return None
    for rule in RULES:
        match = rule.pattern.search(sentence)
        if match is None:
            continue
        value = match.group("v").strip().rstrip(_TRAILING)
        if not value:
            continue
        metadata: dict[str, Any] = {"extractor": EXTRACTOR_ID}
        if rule.polarity:
            metadata["polarity"] = rule.polarity
        return ExtractedItem(
            content=sentence,
            type=rule.type,
            confidence=CONFIDENCE[rule.type],
            key=_key(rule, match, value),
            value=value,
            source_index=index,
            metadata=metadata,
        )
    return None


def extract_rules(messages: Sequence[Mapping[str, Any]]) -> list[ExtractedItem]:
    """The default extractor: one item per first-person statement in the user's messages."""
    items: list[ExtractedItem] = []
    for index, message in enumerate(messages):
        if message.get("role") != "user" or not isinstance(message.get("content"), str):
            continue
        for sentence in sentences(message["content"]):
            item = extract_sentence(sentence, index)
            if item is not None:
                items.append(item)
    return items
