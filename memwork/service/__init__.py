"""The runtime service: the memory facade over HTTP (``memwork serve``), with shadow reads.

``create_app`` is imported lazily so ``import memwork.service.shadow`` (the canary judge's reader)
does not pull in FastAPI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memwork.service.app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from memwork.service.app import create_app

        return create_app
    raise AttributeError(name)
