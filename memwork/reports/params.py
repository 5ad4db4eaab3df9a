"""The notebook's ``parameters`` cell as a typed contract: names, types, defaults and help.

Parameters are declared in the notebook as ``name: type = default  # help``. Reading them with
:mod:`ast` (never executing the cell) lets the runner reject unknown names and coerce values from
the command line *before* a kernel starts, so a typo costs milliseconds, not a failed run.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat

from memwork.checks import parse_bool
from memwork.errors import UsageError


@dataclass(frozen=True)
class Parameter:
    """One declared notebook parameter."""

    name: str
    annotation: str
    default: Any
    help: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.annotation, "default": self.default, "help": self.help}


def parameters_cell(nb: nbformat.NotebookNode) -> nbformat.NotebookNode | None:
    """The first code cell tagged ``parameters`` (papermill's convention), or None."""
    for cell in nb.cells:
        if cell.cell_type == "code" and "parameters" in cell.get("metadata", {}).get("tags", []):
            return cell
    return None


def parse_parameters(source: str) -> dict[str, Parameter]:
    """Declared parameters of a ``parameters`` cell source, in order."""
    tree = ast.parse(source)
    lines = source.splitlines()
    found: dict[str, Parameter] = {}
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            default = ast.literal_eval(node.value) if node.value is not None else None
            rest = lines[(node.end_lineno or node.lineno) - 1].encode()[node.end_col_offset or 0 :].decode()
            help_text = rest.split("#", 1)[1].strip() if "#" in rest else ""
            name = node.target.id
            found[name] = Parameter(name, ast.unparse(node.annotation), default, help_text)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    value = ast.literal_eval(node.value)
                    found[target.id] = Parameter(target.id, type(value).__name__, value, "")
    return found


def read_parameters(notebook: Path | str) -> dict[str, Parameter]:
    """Declared parameters of a notebook file (empty when it has no ``parameters`` cell)."""
    nb = nbformat.read(str(notebook), as_version=4)
    cell = parameters_cell(nb)
    return parse_parameters(cell.source) if cell is not None else {}


def coerce(param: Parameter, value: Any) -> Any:
    """``value`` (often a command-line string) converted to the parameter's annotated type."""
    kinds = [part.strip() for part in param.annotation.split("|")]
    is_none = value is None or (isinstance(value, str) and value.strip().lower() in ("none", "null"))
    if is_none and ("None" in kinds or "Optional" in param.annotation):
        return None
    base = next((k for k in kinds if k != "None"), "str")
    try:
        return _coerce_base(base, value)
    except (ValueError, TypeError, json.JSONDecodeError, UsageError):
        raise UsageError(f"parameter {param.name}", value, f"expected {param.annotation}") from None


def _coerce_base(base: str, value: Any) -> Any:
    if base == "bool":
        return parse_bool("bool", value)  # no default: a blank is not a bool here
    if base == "int":
        if isinstance(value, bool):
            raise ValueError(value)
        if isinstance(value, float) and not value.is_integer():
            raise ValueError(value)
        return int(str(value).strip()) if isinstance(value, str) else int(value)
    if base == "float":
        return float(value)
    if base.startswith(("list", "dict")):
        if isinstance(value, str):
            text = value.strip()
            if base.startswith("list") and not text.startswith("["):
                return [part.strip() for part in text.split(",") if part.strip()]
            value = json.loads(text)
        if not isinstance(value, list if base.startswith("list") else dict):
            raise TypeError(value)
        return value
    return value if isinstance(value, str) else str(value)


def bind_parameters(declared: dict[str, Parameter], given: dict[str, Any], *, name: str) -> dict[str, Any]:
    """Check ``given`` names against ``declared`` and coerce each value; raise on unknown names."""
    unknown = sorted(set(given) - set(declared))
    if unknown:
        known = ", ".join(declared) or "none"
        raise UsageError("parameter", unknown[0], f"not a parameter of report {name!r} (known: {known})")
    return {key: coerce(declared[key], value) for key, value in given.items()}
