"""memwork: analysis and migration workbench for AI-agent long-term memory."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from memwork.entry import Entry

try:
    __version__ = version("memwork")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0+source"

__all__ = ["Entry", "__version__"]
