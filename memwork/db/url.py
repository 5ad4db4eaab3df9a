"""Database URLs, parsed once: the text a user gives becomes a :class:`DatabaseURL` value from which
every store and backend derives what it needs (dialect, driver, the SQLAlchemy and libpq URLs, the
redacted form for messages). Pure: parsing never connects and never starts a server.

Accepted URLs (:data:`SCHEMES`, the one scheme list): ``sqlite:///file.db``, ``mysql://`` /
``mariadb://`` (through PyMySQL), ``postgresql://`` (through psycopg 3) and ``pg://embedded[/NAME]``
(the embedded server, resolved by :func:`memwork.db.embedded.ensure`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from memwork.errors import UsageError
from memwork.identifiers import check_identifier
from memwork.redaction import redact_url, userinfo_has_at

#: scheme as typed (lower case) -> (dialect, the SQLAlchemy dialect+driver memwork uses)
SCHEMES: dict[str, tuple[str, str]] = {
    "sqlite": ("sqlite", "sqlite"),
    "mysql": ("mysql", "mysql+pymysql"),
    "mariadb": ("mysql", "mysql+pymysql"),
    "mysql+pymysql": ("mysql", "mysql+pymysql"),
    "mariadb+pymysql": ("mysql", "mysql+pymysql"),
    "postgresql": ("postgresql", "postgresql+psycopg"),
    "postgres": ("postgresql", "postgresql+psycopg"),
    "postgresql+psycopg": ("postgresql", "postgresql+psycopg"),
    "pg": ("postgresql", "postgresql+psycopg"),  # pg://embedded[/NAME] only
}
EMBEDDED_SCHEME = "pg"
EMBEDDED_DATABASE = "memwork"  #: the database ``pg://embedded`` names
_URL_HINT = "must be a URL like sqlite:///file.db or mysql://user@host/db"


@dataclass(frozen=True)
class DatabaseURL:
    """A database URL parsed once: everything memwork derives from the text, computed up front.

    ``sqlalchemy`` and ``libpq`` are None for ``pg://embedded[/NAME]`` until
    `memwork.db.embedded.ensure` has started the server and resolved it (``libpq`` is None
    for SQLite and MySQL too: psycopg cannot connect there).
    """

    # the three URL forms may hold a password: never in repr() (tracebacks, notebook output)
    text: str = field(repr=False)  #: the URL as given (after ``embedded.ensure``: the server's)
    dialect: str  #: ``sqlite``, ``mysql`` or ``postgresql``
    driver: str  #: SQLAlchemy dialect+driver, known without connecting (``postgresql+psycopg``)
    sqlalchemy: str | None = field(repr=False)  #: the URL SQLAlchemy connects to
    libpq: str | None = field(repr=False)  #: the ``postgresql://`` URL psycopg connects to
    redacted: str  #: ``text`` with its password hidden, for messages
    embedded: str | None = None  #: the database NAME of ``pg://embedded[/NAME]``, else None

    def __str__(self) -> str:
        return self.redacted


def is_database_url(text: object) -> bool:
    """True when ``text`` has a scheme memwork can open (not yet whether the rest is valid)."""
    return isinstance(text, str) and text.split("://", 1)[0].strip().lower() in SCHEMES and "://" in text


def parse_url(text: str | DatabaseURL) -> DatabaseURL:
    """Parse a user-facing database URL into a :class:`DatabaseURL`; never connects, never starts a
    server. UsageError for a text that is not a URL, an unknown scheme or a bad ``pg://`` name."""
    if isinstance(text, DatabaseURL):
        return text
    if not isinstance(text, str) or "://" not in text:
        raise UsageError("database_url", text, _URL_HINT)
    text = text.strip()
    scheme, rest = text.split("://", 1)
    scheme = scheme.lower()
    redacted = redact_url(text) or text
    if scheme not in SCHEMES:
        raise UsageError("database_url", redacted, f"unsupported scheme {scheme!r}")
    dialect, driver = SCHEMES[scheme]
    if userinfo_has_at(text):
        raise UsageError("database_url", redacted, "the password holds an unencoded '@': write it as %40")
    if scheme == EMBEDDED_SCHEME:
        parts = urlsplit(text)
        if parts.netloc != "embedded":
            raise UsageError(
                "store", redacted, "the embedded PostgreSQL is named pg://embedded or pg://embedded/NAME"
            )
        name = check_identifier(parts.path.strip("/") or EMBEDDED_DATABASE, field="database")
        return DatabaseURL(text, dialect, driver, None, None, redacted, embedded=name)
    sqlalchemy = text if dialect == "sqlite" else f"{driver}://{rest}"
    libpq = f"postgresql://{rest}" if dialect == "postgresql" else None
    return DatabaseURL(text, dialect, driver, sqlalchemy, libpq, redacted)
