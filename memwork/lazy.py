"""Package names imported from their submodule when first asked for (PEP 562), written once.

A package that re-exports its submodules' public names would import every submodule (and what they
import: scikit-learn, nbformat, ...) on its own import; a report's kernel asking for one name paid for
all of them (issue 20). :func:`lazy_exports` gives a package the module ``__getattr__`` and ``__dir__``
that import a name's submodule on first use and keep the name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    namespace: dict[str, Any], exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for the package whose ``globals()`` is ``namespace``;
    ``exports`` maps each public name to the submodule (relative to the package) that defines it."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *namespace.get("__all__", ())})

    return __getattr__, __dir__
