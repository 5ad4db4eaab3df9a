"""Which memwork made an artifact: its version and the git commit of its code, wherever it runs.

An approval artifact must pin the code, also when memwork runs from an ops folder outside any checkout
(the sign-off of a rollout) or was installed from a wheel. So the commit is memwork's own, never the
working folder's, found in this order:

1. the source checkout memwork is imported from (an editable install, or ``python -m memwork`` in the
   repository): ``git rev-parse HEAD`` there, ``-dirty`` when tracked files changed -- read now, so it
   follows every commit without a reinstall;
2. ``memwork/_build.py``, written by the build (setup.py's ``build_py`` and ``sdist`` steps) from the
   checkout the wheel or sdist was made of;
3. ``memwork/_archive.py``, whose placeholder git itself fills in when the tree is exported with
   ``git archive`` (``export-subst``), for code that travelled as an archive rather than a clone;
4. the installed distribution's ``direct_url.json`` (PEP 610): ``vcs_info.commit_id`` of a
   ``pip install git+https://...``;
5. ``unknown``.

:func:`folder_commit` is the other fact a report records: the git commit of the folder it ran in
(the project using memwork), or None outside a repository.
"""

from __future__ import annotations

import functools
import importlib
import json
import re
import subprocess
from importlib.metadata import PackageNotFoundError, distribution, version
from pathlib import Path

UNKNOWN = "unknown"
BUILD_MODULE = "memwork._build"  #: generated at build time; absent from a checkout
ARCHIVE_MODULE = "memwork._archive"  #: filled in by ``git archive`` (export-subst); a placeholder elsewhere
_PACKAGE_DIR = Path(__file__).resolve().parent


def memwork_version() -> str:
    """The installed distribution's version (``0.0.0+source`` when memwork is not installed)."""
    try:
        return version("memwork")
    except PackageNotFoundError:
        return "0.0.0+source"


@functools.cache
def memwork_commit() -> str:
    """The git commit of the running memwork's code (see the module docstring for where it comes from)."""
    return _checkout_commit(_PACKAGE_DIR) or _built_commit() or _archived_commit() or _vcs_commit() or UNKNOWN


def folder_commit(folder: Path | str | None = None) -> str | None:
    """HEAD of the git repository holding ``folder`` (default: the working directory), ``-dirty``
    with changes to tracked files; None outside a repository."""
    return _head(Path.cwd() if folder is None else Path(folder))


def _checkout_commit(package_dir: Path) -> str | None:
    """HEAD of the repository the package is imported from, when its files are tracked there (a
    wheel installed into a venv that happens to sit inside some repository is not a checkout)."""
    try:
        tracked = subprocess.run(
            ["git", "-C", str(package_dir), "ls-files", "--error-unmatch", "__init__.py"],
            capture_output=True, text=True, timeout=5,
        ).returncode == 0  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return _head(package_dir) if tracked else None


def _head(folder: Path) -> str | None:
    try:
        head = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(folder), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=5,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return (head + ("-dirty" if dirty else "")) if head else None


def _built_commit() -> str | None:
    try:
        module = importlib.import_module(BUILD_MODULE)
    except ImportError:
        return None
    commit = getattr(module, "COMMIT", None)
    return commit if isinstance(commit, str) and commit else None


def _archived_commit() -> str | None:
    """The commit ``git archive`` wrote into :data:`ARCHIVE_MODULE` (None while it is the placeholder)."""
    try:
        module = importlib.import_module(ARCHIVE_MODULE)
    except ImportError:
        return None
    commit = getattr(module, "COMMIT", None)
    if not isinstance(commit, str) or not re.fullmatch(r"[0-9a-f]{40}", commit):
        return None
    return commit


def _vcs_commit() -> str | None:
    try:
        text = distribution("memwork").read_text("direct_url.json")
    except PackageNotFoundError:
        return None
    try:
        commit = json.loads(text or "{}").get("vcs_info", {}).get("commit_id")
    except (ValueError, AttributeError):
        return None
    return commit if isinstance(commit, str) and commit else None
