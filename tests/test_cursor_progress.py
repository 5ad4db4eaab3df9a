"""A listing that never ends under ever-new cursors is a loop too (second adversarial pass, class 6).

The cursor check stops A -> B -> A, but a source whose cursor is always new while its pages are not --
a LangGraph Store that ignores ``offset`` (the built-in source's next cursor is ``offset + len``), a
cursor that grows by a character a page, empty pages with a fresh cursor each -- was followed forever:
against the fake Store below, 4,925 pages of the same 25 items in 60 s, a checkpoint counting 123,125
rows read for 25 rows. Now a page holding exactly the records of an earlier page of the run, while the
listing goes on, and a long run of empty pages both stop the listing with a message naming the source;
the pages before stay committed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from fakes.langgraph import FakeLangGraph
from fakes.server import Request, Response, serve

from memwork.errors import BackendError
from memwork.migrate.run import ImportOptions, run_import
from memwork.migrate.source import Page, SourceRecord, iter_pages

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def record(i: int, content: str | None = None) -> SourceRecord:
    return SourceRecord(
        id=f"r-{i:04d}", user_id=f"u-{i % 3}", content=content or f"memory {i}", created_at=T0 + timedelta(i)
    )


class Scripted:
    """A source whose pages come from ``pages(cursor, size)``; counts its reads (bounded by the test)."""

    name = "scripted"
    key = "scripted:test"

    def __init__(self, pages, limit: int = 5000) -> None:
        self.pages, self.reads, self.limit = pages, 0, limit

    def read_page(self, cursor, size):
        self.reads += 1
        if self.reads > self.limit:
            raise AssertionError("the listing was followed past the test's bound")
        return self.pages(cursor, size)

    def close(self) -> None:
        pass


RECORDS = [record(i) for i in range(100)]


def ignores_offset(cursor, size):  # next = offset + len, but the server always answers the first page
    return Page(RECORDS[:size], str(int(cursor or 0) + size))


def growing_cursor(cursor, size):
    return Page(RECORDS[:size], (cursor or "") + "x")


def empty_forever(cursor, size):
    return Page([], str(int(cursor or 0) + 1))


@pytest.mark.parametrize("pages", [ignores_offset, growing_cursor], ids=["ignores-offset", "growing-cursor"])
def test_a_page_repeating_an_earlier_one_under_a_new_cursor_stops_the_listing(pages):
    source = Scripted(pages)
    handed_on = []
    with pytest.raises(BackendError, match=r"scripted \(scripted:test\).*same records as page 1"):
        for page, _cursor in iter_pages(source, None, 10):
            handed_on.append(page)
    assert len(handed_on) == 1 and source.reads == 2


def test_empty_pages_without_end_stop_the_listing():
    from memwork.migrate.source import MAX_EMPTY_PAGES

    source = Scripted(empty_forever, limit=MAX_EMPTY_PAGES + 10)
    with pytest.raises(BackendError, match=f"{MAX_EMPTY_PAGES} empty pages in a row"):
        for _ in iter_pages(source, None, 10):
            pass
    assert source.reads == MAX_EMPTY_PAGES


def test_a_listing_that_advances_is_read_whole_even_with_repeated_ids_and_empty_pages():
    """Every id twice (the later copy differs) and empty pages in between: no loop, every page read."""
    copies = RECORDS[:40] + [record(i, content=f"second copy {i}") for i in range(40)]
    listing = []
    for start in range(0, 80, 10):
        listing += [copies[start : start + 10], []]

    def pages(cursor, size):
        n = int(cursor or 0)
        return Page(listing[n], str(n + 1) if n + 1 < len(listing) else None)

    read = [r.id for page, _ in iter_pages(Scripted(pages), None, 10) for r in page.records]
    assert len(read) == 80 and sorted(set(read)) == [r.id for r in RECORDS[:40]]


class StoreIgnoringOffset(FakeLangGraph):
    """A LangGraph Store (or a proxy in front of one) that drops the search body's ``offset``."""

    def search_items(self, request: Request) -> Response:
        if isinstance(request.body, dict):
            request.body["offset"] = 0
        return super().search_items(request)


def test_the_langgraph_import_stops_when_the_store_ignores_offset(pg_url):
    fake = StoreIgnoringOffset()
    fake.seed(users=3, per_user=30)
    with serve(fake) as url:
        options = ImportOptions(
            source="langgraph",
            env={"MEMORY_LANGGRAPH_URL": url},
            database_url=pg_url,
            apply=True,
            create_schema=True,
            page_size=25,
            embedder="hash:8",
        )
        with pytest.raises(BackendError, match="same records as page 1"):
            run_import(options)
        searches = sum(1 for r in fake.requests if r.path.startswith("/store/items/search"))
    assert searches == 2
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM memory_embeddings").fetchone()[0] == 25
        rows_read = conn.execute("SELECT rows_read FROM memwork_import_checkpoints").fetchone()[0]
    assert rows_read == 25
