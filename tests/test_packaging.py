"""Packaging that works outside a checkout, and dependencies declared honestly.

``test_imports_match_declared_dependencies`` compares the third-party modules memwork imports (its
code and the notebooks it ships) with pyproject.toml. ``test_non_editable_install_outside_the_checkout``
builds the wheel, installs it non-editable into a fresh venv and runs ``memwork demo`` and
``memwork report health_report`` from a folder that is not the checkout.

The fresh venv takes its *dependencies* from the dev venv (a ``.pth`` to a view of its site-packages
without memwork's own editable install), so the test needs no network and takes a minute, and it
checks that every requirement in the wheel's metadata is satisfied there; memwork itself comes only
from the wheel.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from functools import cache
from importlib.metadata import packages_distributions
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

#: declared runtime dependencies memwork never imports, and why they are declared anyway
NOT_IMPORTED: dict[str, str] = {}
#: extras' packages memwork never imports
NOT_IMPORTED_EXTRAS = {
    "torch": "pinned so sentence-transformers does not pull a CUDA build",
    "jupyterlab": "a tool to open the notebooks, not a library",
}


def _name(requirement: str) -> str:
    """``psycopg[binary]>=3.2`` -> ``psycopg`` (normalised distribution name)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def _top_level_imports(source: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _third_party_imports() -> dict[str, set[str]]:
    """Top-level module -> the files importing it, over memwork/ and the shipped notebooks."""
    found: dict[str, set[str]] = {}
    sources = [(p, p.read_text(encoding="utf-8")) for p in (ROOT / "memwork").rglob("*.py")]
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = nbformat.read(str(path), as_version=4).cells
        code = [c.source for c in cells if c.cell_type == "code"]
        # IPython magics and shell lines are not Python
        text = "\n".join(line for cell in code for line in cell.splitlines() if line.lstrip()[:1] not in "%!")
        sources.append((path, text))
    for path, text in sources:
        for name in _top_level_imports(text):
            if name not in sys.stdlib_module_names and name != "memwork":
                found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


_packages_distributions = cache(packages_distributions)


def _distributions(module: str) -> set[str]:
    """The distributions providing import name ``module`` (by name when it is not installed)."""
    dists = _packages_distributions().get(module) or [module]
    return {_name(d) for d in dists}


def test_imports_match_declared_dependencies():
    runtime = {_name(r) for r in PYPROJECT["project"]["dependencies"]}
    extras = {
        extra: {_name(r) for r in reqs}
        for extra, reqs in PYPROJECT["project"]["optional-dependencies"].items()
        if extra != "dev"  # tools for the repository (pytest, ruff, ...), not memwork's
    }
    imports = _third_party_imports()
    undeclared = {
        module: sorted(files)
        for module, files in imports.items()
        if not _distributions(module) & (runtime | set().union(*extras.values()))
    }
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"
    imported = set().union(*(_distributions(m) for m in imports))
    unused = runtime - imported - set(NOT_IMPORTED)
    assert not unused, f"declared but never imported by memwork/ or its notebooks: {sorted(unused)}"
    unused_extras = set().union(*extras.values()) - imported - set(NOT_IMPORTED_EXTRAS)
    assert not unused_extras, f"extras' packages never imported: {sorted(unused_extras)}"
    stale = (set(NOT_IMPORTED) - runtime) | (set(NOT_IMPORTED) & imported)
    assert not stale, f"NOT_IMPORTED is out of date: {sorted(stale)}"


def test_package_data_names_only_existing_files():
    for package, patterns in PYPROJECT["tool"]["setuptools"]["package-data"].items():
        folder = ROOT / "notebooks" if package == "memwork.notebooks" else ROOT / package.replace(".", "/")
        for pattern in patterns:
            assert list(folder.glob(pattern)), f"package-data {package}: {pattern} matches nothing"


def _run(args: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(args, capture_output=True, text=True, timeout=900, **kwargs)
    assert result.returncode == 0, (
        f"{' '.join(args)} -> {result.returncode}\n{result.stdout}\n{result.stderr}"
    )
    return result


def _dependency_view(target: Path) -> Path:
    """A folder of links to the dev venv's installed packages, minus memwork itself and .pth hooks."""
    target.mkdir()
    site = Path(sysconfig.get_paths()["purelib"])
    for entry in site.iterdir():
        name = entry.name.lower()
        if name.endswith(".pth") or "memwork" in name:
            continue
        (target / entry.name).symlink_to(entry)
    return target


@pytest.mark.slow
def test_non_editable_install_outside_the_checkout(tmp_path):
    dist = tmp_path / "dist"
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(dist),
            str(ROOT),
        ]
    )
    (wheel,) = dist.glob("memwork-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for shipped in ("health_report", "duplicate_review", "backfill_verification", "canary_signoff"):
        assert f"memwork/notebooks/{shipped}.ipynb" in names
    assert "memwork/embed_data/all-MiniLM-L6-v2/tokenizer.json" in names
    assert "memwork/py.typed" in names
    assert not [n for n in names if n.startswith(("tests/", "notebooks/", "benchmarks/"))]

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    site = Path(
        _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    )
    (site / "memwork_test_dependencies.pth").write_text(str(_dependency_view(tmp_path / "deps")) + "\n")
    for data in ("share/jupyter", "etc/jupyter"):  # what the dependencies' wheels put in the prefix
        source = Path(sys.prefix) / data  # (nbconvert's HTML templates, jupyter config)
        if source.exists():
            (venv / data).parent.mkdir(parents=True, exist_ok=True)
            (venv / data).symlink_to(source)
    _run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)])

    # the wheel's own requirements are all satisfied by what the venv sees
    check = """
import json
from importlib.metadata import distribution, version
from packaging.requirements import Requirement
import memwork, memwork.reports.runner as runner
missing = []
for text in distribution("memwork").requires or []:
    req = Requirement(text)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    try:
        if version(req.name) not in req.specifier:
            missing.append(text)
    except Exception:
        missing.append(text)
print(json.dumps({"missing": missing, "memwork": memwork.__file__, "notebooks": str(runner.notebooks_dir())}))
"""
    outside = tmp_path / "project"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMWORK_", "VIRTUAL_ENV", "PYTHON"))}
    env.update(
        MEMWORK_HOME=str(tmp_path / "home"),
        MEMWORK_CACHE_DIR=os.environ["MEMWORK_CACHE_DIR"],
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
    )
    facts = json.loads(_run([str(python), "-c", check], cwd=outside, env=env).stdout)
    assert facts["missing"] == []
    assert facts["memwork"].startswith(str(site)) and facts["notebooks"].startswith(str(site))

    # provenance names memwork's own code -- the commit the wheel was built from, recorded at build
    # time -- wherever it runs: from a folder outside any repository, and from a project repository
    # of its own (whose commit is recorded apart, as the working folder's)
    built = json.loads(
        _run([str(python), "-c", PROVENANCE], cwd=outside, env=env).stdout
    )  # fmt: skip
    assert built["commit"] == _checkout_commit() and built["folder"] is None
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-C", str(outside)]
    _run([*git, "init", "-q"])
    (outside / "notes.txt").write_text("a project that uses memwork\n")
    _run([*git, "add", "notes.txt"])
    _run([*git, "commit", "-q", "-m", "start"])
    head = _run([*git, "rev-parse", "HEAD"]).stdout.strip()

    memwork = str(venv / "bin" / "memwork")
    try:
        small = ["--users", "20", "--entries", "200"]  # the full size runs in `make demo`
        demo = json.loads(_run([memwork, "demo", *small, "--json"], cwd=outside, env=env).stdout)
        verdicts = {r["name"]: r["verdict"] for r in demo["runs"]}
        # the shadow-read canary's verdict is a finding (its judge is tested elsewhere); it must be one
        assert verdicts.pop("canary_signoff (shadow reads)") in ("GO", "NO-GO", "INCONCLUSIVE"), demo
        assert verdicts.pop("canary_signoff (real text)") in ("GO", "NO-GO", "INCONCLUSIVE"), demo
        assert demo["exit_code"] == 0
        assert verdicts == {
            "health_report": "PASS",
            "duplicate_review": "INFO",
            "backfill_verification": "PASS",
            "canary_signoff": "GO",
        }, demo
        store = demo["data"]["store"]
        _run([memwork, "report", "health_report", "-p", "store", store], cwd=outside, env=env)
    finally:  # the demo's embedded PostgreSQL lives in MEMWORK_HOME and outlives the commands
        subprocess.run([memwork, "pgvector", "url", "--stop"], cwd=outside, env=env, capture_output=True)
    manifests = [
        json.loads(m.read_text()) for m in (outside / "reports").glob("*-health_report*/manifest.json")
    ]
    assert len(manifests) == 2  # the demo's and ours
    assert {m["git_commit"] for m in manifests} == {_checkout_commit()}  # memwork's code, not the project's
    assert {m["working_folder_commit"] for m in manifests} == {head}
    assert {m["memwork_version"] for m in manifests} == {PYPROJECT["project"]["version"]}
    signoffs = [
        json.loads(p.read_text()) for p in (outside / "reports").glob("*-canary_signoff*/summary.json")
    ]
    assert signoffs and {s["signoff"]["git_commit"] for s in signoffs} == {_checkout_commit()}


def _checkout_commit() -> str:
    """HEAD of this checkout, ``-dirty`` with changed tracked files (what a build records)."""
    head = _run(["git", "-C", str(ROOT), "rev-parse", "HEAD"]).stdout.strip()
    dirty = _run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"]).stdout.strip()
    return head + ("-dirty" if dirty else "")


PROVENANCE = (
    "import json; from memwork.provenance import memwork_commit, folder_commit; "
    "print(json.dumps({'commit': memwork_commit(), 'folder': folder_commit()}))"
)


def test_memwork_commit_is_the_code_s_not_the_working_folder_s(tmp_path):
    """The editable install (this venv) names the checkout's commit from any folder: outside every
    repository, and inside another project's repository, whose commit is the folder's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    outside = json.loads(_run([sys.executable, "-c", PROVENANCE], cwd=tmp_path, env=env).stdout)
    assert outside == {"commit": _checkout_commit(), "folder": None}
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    _run([*git, "init", "-q"], cwd=tmp_path)
    (tmp_path / "a.txt").write_text("a\n")
    _run([*git, "add", "a.txt"], cwd=tmp_path)
    _run([*git, "commit", "-q", "-m", "a"], cwd=tmp_path)
    head = _run(["git", "rev-parse", "HEAD"], cwd=tmp_path).stdout.strip()
    inside = json.loads(_run([sys.executable, "-c", PROVENANCE], cwd=tmp_path, env=env).stdout)
    assert inside == {"commit": _checkout_commit(), "folder": head}
    (tmp_path / "a.txt").write_text("b\n")
    dirty = json.loads(_run([sys.executable, "-c", PROVENANCE], cwd=tmp_path, env=env).stdout)
    assert dirty["folder"] == f"{head}-dirty"


def test_a_report_records_memwork_s_commit_when_run_outside_any_repository(tmp_path):
    """The rollout's sign-off runs from an ops folder: its provenance still pins memwork's code."""
    from memwork.reports import run_report

    ops = tmp_path / "ops"
    ops.mkdir()
    run = run_report(str(ROOT / "tests" / "data" / "tiny_report.ipynb"), {}, ops / "reports", cwd=ops)
    manifest = json.loads(run.manifest_path.read_text())
    assert manifest["git_commit"] == _checkout_commit() != "unknown"
    assert manifest["working_folder_commit"] is None
    assert _checkout_commit() in run.html_path.read_text()


@pytest.mark.slow
def test_a_wheel_records_the_commit_it_was_built_from(tmp_path):
    """setup.py's build step writes memwork/_build.py into the wheel (never into the checkout)."""
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(ROOT),
        ]
    )
    (wheel,) = tmp_path.glob("memwork-*.whl")
    recorded = zipfile.ZipFile(wheel).read("memwork/_build.py").decode()
    assert f"COMMIT = {_checkout_commit()!r}" in recorded
    assert not (ROOT / "memwork" / "_build.py").exists()
