"""Databases: URLs parsed once, the embedded PostgreSQL, and connections -- in that order of dependency.

* :mod:`memwork.db.url` -- :class:`DatabaseURL` and :func:`parse_url`: pure, never connects;
* :mod:`memwork.db.embedded` -- the embedded PostgreSQL + pgvector server, and
  :func:`~memwork.db.embedded.ensure`, the one way ``pg://embedded[/NAME]`` becomes a server URL;
* :mod:`memwork.db.connect` -- SQLAlchemy engines and psycopg connections (``pg://embedded``
  resolved first).

Everything a caller needs is importable from ``memwork.db`` itself.
"""

from memwork.db.connect import (
    dispose_all,
    get_engine,
    mysql_errors,
    pg_connect,
    pg_value,
    ran_out_of_time,
)
from memwork.db.url import (
    EMBEDDED_DATABASE,
    EMBEDDED_SCHEME,
    SCHEMES,
    DatabaseURL,
    is_database_url,
    parse_url,
)

__all__ = [
    "EMBEDDED_DATABASE",
    "EMBEDDED_SCHEME",
    "SCHEMES",
    "DatabaseURL",
    "dispose_all",
    "get_engine",
    "is_database_url",
    "mysql_errors",
    "parse_url",
    "pg_connect",
    "pg_value",
    "ran_out_of_time",
]
