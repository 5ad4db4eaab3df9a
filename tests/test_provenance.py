"""memwork names its own commit wherever its code travelled: a checkout, and a ``git archive`` export."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PRINT_COMMIT = "import memwork.provenance as p; print(p.memwork_commit())"


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def head() -> str:
    try:
        return _git("rev-parse", "HEAD").strip()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")


def test_a_git_archive_export_names_the_commit_it_was_exported_from(tmp_path: Path, head: str) -> None:
    archive = tmp_path / "memwork.tar"
    subprocess.run(["git", "-C", str(REPO), "archive", "-o", str(archive), "HEAD"], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / "export", filter="data")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "export")}
    # run from a folder outside every repository, importing the exported code (not the checkout's)
    done = subprocess.run(
        [sys.executable, "-c", f"import memwork; assert 'export' in memwork.__file__; {PRINT_COMMIT}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == head


def test_in_a_checkout_the_placeholder_means_nothing() -> None:
    from memwork import _archive, provenance

    assert _archive.COMMIT.startswith("$Format")  # git fills it in only when exporting
    assert provenance._archived_commit() is None
