"""No import cycle between memwork's units, and the bottom layer imports no feature -- so it stays true.

A *unit* is a top-level module (``memwork/http.py``) or a subpackage (``memwork/stores/``) of memwork.
Every import counts, those inside functions too (a function-local import is a dependency that only
waits for its first call); imports under ``if TYPE_CHECKING:`` do not (they never run).

The arrows in :data:`PENDING_MOVES` still close cycles; each names the section of issue 16 whose move
removes it. Whoever lands that section deletes its entries: the test fails for an entry whose arrow is
gone or no longer closes a cycle, so the list can only shrink.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "memwork"
PACKAGE = "memwork"

#: (importing module, imported module) -> the move that removes the arrow. Each is ``pgvector`` reaching
#: above itself (``backends`` imports ``pgvector.schema``, so pgvector/ must import nothing above it).
PENDING_MOVES: dict[tuple[str, str], str] = {}

#: the bottom layer (ARCHITECTURE.md, plus loggable: the log-line scrubbing http and the service share,
#: and deadline: the running call's deadline and commit gate, which the database layer reads):
#: it imports nothing but itself, so every feature may import it
FOUNDATION = frozenset(
    {
        "contracts",
        "entry",
        "errors",
        "checks",
        "redaction",
        "identifiers",
        "workspace",
        "progress",
        "loggable",
        "deadline",
        "percentiles",
    }
)
#: the layer above it (pgvector's schema sits there too, but the unit ``pgvector`` still holds features)
INFRASTRUCTURE = frozenset({"db", "http", "embed", "coverage", "similarity"})
#: the layer above that: what the facade and the features build on (the unit ``pgvector`` may be
#: imported from here for its schema)
ADAPTERS = frozenset({"backends", "legacy", "stores", "plugins"})
#: the top: the CLI, the Python API (``memwork.api``) and the package's ``__init__`` that serves it
#: lazily (the notebooks, outside memwork/, sit there too)
TOP = frozenset({"cli", "api", "memwork"})


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def unit_of(module: str) -> str:
    """``memwork.stores.sql`` -> ``stores``; ``memwork`` (the package's own ``__init__``) -> ``memwork``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for statement in node.body:
                skipped.update(id(inner) for inner in ast.walk(statement))
    return skipped


def _imported(
    node: ast.Import | ast.ImportFrom, current: str, is_package: bool, modules: set[str]
) -> list[str]:
    """The memwork modules one import statement loads: ``from memwork.db import url`` -> memwork.db.url."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            base = current.split(".") if is_package else current.split(".")[:-1]
            base = base[: len(base) - node.level + 1]
            origin = ".".join([*base, *([node.module] if node.module else [])])
        else:
            origin = node.module or ""
        names = [f"{origin}.{a.name}" if f"{origin}.{a.name}" in modules else origin for a in node.names]
    found = []
    for name in names:
        while name and name not in modules and "." in name:  # `import memwork.db.url` loads memwork.db.url
            name = name.rsplit(".", 1)[0]
        if name in modules:
            found.append(name)
    return found


def module_arrows(root: Path = ROOT) -> dict[tuple[str, str], list[int]]:
    """(importing module, imported module) -> the lines of the imports, over every module of ``root``."""
    files = {module_name(p, root): p for p in root.rglob("*.py")}
    modules = set(files)
    arrows: dict[tuple[str, str], list[int]] = defaultdict(list)
    for current, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        skipped = _type_checking_nodes(tree)
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in skipped:
                for target in _imported(node, current, is_package, modules):
                    if target != current:
                        arrows[(current, target)].append(node.lineno)
    return arrows


def unit_graph(arrows: Iterable[tuple[str, str]]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for importer, imported in arrows:
        if unit_of(importer) != unit_of(imported):
            graph[unit_of(importer)].add(unit_of(imported))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one unit (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(unit: str) -> None:
        index[unit] = low[unit] = len(index)
        stack.append(unit)
        on_stack.add(unit)
        for other in sorted(graph.get(unit, ())):
            if other not in index:
                visit(other)
                low[unit] = min(low[unit], low[other])
            elif other in on_stack:
                low[unit] = min(low[unit], index[other])
        if low[unit] == index[unit]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == unit:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for unit in sorted(graph):
        if unit not in index:
            visit(unit)
    return found


def _shown(arrows: dict[tuple[str, str], list[int]], units: list[str]) -> str:
    inside = set(units)
    return "\n".join(
        f"  {importer} -> {imported} (line {', '.join(map(str, lines))})"
        for (importer, imported), lines in sorted(arrows.items())
        if unit_of(importer) in inside
        and unit_of(imported) in inside
        and unit_of(importer) != unit_of(imported)
    )


def test_no_import_cycle_between_units():
    arrows = module_arrows()
    kept = {arrow: lines for arrow, lines in arrows.items() if arrow not in PENDING_MOVES}
    found = cycles(unit_graph(kept))
    assert not found, "import cycles between units:\n" + "\n".join(
        " <-> ".join(units) + "\n" + _shown(kept, units) for units in found
    )


def test_every_pending_move_is_still_an_arrow_on_a_cycle():
    """An entry whose arrow is gone, or no longer closes a cycle, is deleted -- the list only shrinks."""
    arrows = module_arrows()
    components = [set(units) for units in cycles(unit_graph(arrows))]
    stale = [
        f"{importer} -> {imported} ({why})"
        for (importer, imported), why in PENDING_MOVES.items()
        if (importer, imported) not in arrows
        or not any({unit_of(importer), unit_of(imported)} <= units for units in components)
    ]
    assert not stale, "delete these PENDING_MOVES entries:\n" + "\n".join(stale)


def test_the_foundation_imports_no_feature():
    """contracts, entry, errors, checks, redaction, identifiers, workspace, progress: only each other."""
    wrong = {
        arrow: lines
        for arrow, lines in module_arrows().items()
        if unit_of(arrow[0]) in FOUNDATION and unit_of(arrow[1]) not in FOUNDATION
    }
    assert not wrong, "\n".join(f"{a} -> {b} (line {lines})" for (a, b), lines in sorted(wrong.items()))


def test_the_infrastructure_imports_only_the_foundation_and_itself():
    """db, http, embed, coverage, similarity: never a store, a backend, a feature or the CLI."""
    allowed = FOUNDATION | INFRASTRUCTURE
    wrong = {
        arrow: lines
        for arrow, lines in module_arrows().items()
        if unit_of(arrow[0]) in INFRASTRUCTURE and unit_of(arrow[1]) not in allowed
    }
    assert not wrong, "\n".join(f"{a} -> {b} (line {lines})" for (a, b), lines in sorted(wrong.items()))


def test_backends_stores_and_the_registry_import_no_feature():
    """backends, legacy, stores, plugins: never the facade, the service, a migration, defrag, rollout,
    reports, samples or the CLI."""
    allowed = FOUNDATION | INFRASTRUCTURE | ADAPTERS | {"pgvector"}
    wrong = {
        arrow: lines
        for arrow, lines in module_arrows().items()
        if unit_of(arrow[0]) in ADAPTERS and unit_of(arrow[1]) not in allowed
    }
    assert not wrong, "\n".join(f"{a} -> {b} (line {lines})" for (a, b), lines in sorted(wrong.items()))


def test_the_rollout_sits_above_the_service_the_facade_the_migration_and_the_backends():
    """Only the top layer and the samples (the demo's shadow canary) import rollout/; rollout imports
    neither the CLI nor the samples (a notebook hands it the sample migration it gates)."""
    wrong = {
        arrow: lines
        for arrow, lines in module_arrows().items()
        if (unit_of(arrow[1]) == "rollout" and unit_of(arrow[0]) not in TOP | {"rollout", "samples"})
        or (unit_of(arrow[0]) == "rollout" and unit_of(arrow[1]) in TOP | {"samples"})
    }
    assert not wrong, "\n".join(f"{a} -> {b} (line {lines})" for (a, b), lines in sorted(wrong.items()))


def test_pgvector_is_the_destination_only():
    """pgvector/ holds the destination (schema, query-embedding modules): it imports only the layers
    below it and knows nothing about the legacy MySQL table or the migration."""
    allowed = FOUNDATION | INFRASTRUCTURE | {"pgvector"}
    wrong = {
        arrow: lines
        for arrow, lines in module_arrows().items()
        if unit_of(arrow[0]) == "pgvector" and unit_of(arrow[1]) not in allowed
    }
    assert not wrong, "\n".join(f"{a} -> {b} (line {lines})" for (a, b), lines in sorted(wrong.items()))
    mentions = [
        path.name
        for path in (ROOT / "pgvector").rglob("*.py")
        if any(word in path.read_text(encoding="utf-8").lower() for word in ("mysql", "memwork_backfill"))
    ]
    assert not mentions, mentions


def test_the_samples_are_called_only_from_the_top_layer():
    """samples/ builds demo data from every feature; a feature calling it closes a cycle."""
    wrong = {
        arrow: lines
        for arrow, lines in module_arrows().items()
        if unit_of(arrow[1]) == "samples"
        and unit_of(arrow[0]) not in TOP | {"samples"}
        and arrow not in PENDING_MOVES
    }
    assert not wrong, "\n".join(f"{a} -> {b} (line {lines})" for (a, b), lines in sorted(wrong.items()))


def test_the_graph_sees_function_local_imports_and_skips_type_checking_ones(tmp_path):
    """The test itself: a lazy import is an arrow, a TYPE_CHECKING one is not, relative imports resolve."""
    pkg = tmp_path / PACKAGE
    (pkg / "low").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "__init__.py").write_text("")
    (pkg / "low" / "base.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from memwork.high import Thing\n"
        "def f():\n    from memwork import high\n"
    )
    (pkg / "low" / "other.py").write_text("from .base import f\n")
    (pkg / "high.py").write_text("from memwork.low.base import f\n")
    arrows = module_arrows(pkg)
    assert set(arrows) == {
        ("memwork.low.base", "memwork.high"),
        ("memwork.low.other", "memwork.low.base"),
        ("memwork.high", "memwork.low.base"),
    }
    assert cycles(unit_graph(arrows)) == [["high", "low"]]
