"""memwork: analysis and migration workbench for AI-agent long-term memory."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from memwork.entry import Entry

try:
    __version__ = version("memwork")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0+source"

__all__ = ["Entry", "MemoryFacade", "__version__", "facade_from_env"]

_LAZY = {"MemoryFacade": "memwork.facade.facade", "facade_from_env": "memwork.facade.facade"}


def __getattr__(name: str) -> Any:
    """Import the facade only when asked for, so ``import memwork`` stays light."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'memwork' has no attribute {name!r}")
