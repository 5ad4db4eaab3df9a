"""memwork: analysis and migration workbench for AI-agent long-term memory.

The Python API is :mod:`memwork.api`, every verb also reachable here (``memwork.open_store``,
``memwork.duplicates``, ``memwork.import_source``, ...) and imported only when first used, so
``import memwork`` stays light.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from memwork.entry import Entry

try:
    __version__ = version("memwork")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0+source"

#: the API's verbs (:data:`memwork.api.__all__`), listed here so ``import memwork`` need not load it
API = (
    "MemoryFacade",
    "duplicate_review",
    "duplicates",
    "facade_from_env",
    "health_report",
    "import_source",
    "list_entries",
    "open_store",
    "preview_merge",
    "read_entry",
    "related",
    "run_action",
    "run_report",
    "sample_store",
    "undo",
    "user_memories",
    "verify_import",
)

__all__ = ["Entry", "__version__", *API]


def __getattr__(name: str) -> Any:
    """An API verb, imported when first asked for (``memwork.open_store``), so ``import memwork``
    stays light."""
    if name in API:
        import importlib

        return getattr(importlib.import_module("memwork.api"), name)
    raise AttributeError(f"module 'memwork' has no attribute {name!r}")
