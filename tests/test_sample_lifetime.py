"""Sample stores built without a location (notebook defaults, tests, a REPL) live in a temporary
folder as long as the process that built them (:func:`memwork.samples.process_temp_folder`): each
run used to leave one behind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _run(script: str, *args: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, check=True, timeout=300
    )
    return done.stdout.split()


def test_a_sample_store_lives_as_long_as_its_process():
    script = (
        "from pathlib import Path\n"
        "import memwork\n"
        "spec = memwork.sample_store(30, embedder='hash:16')\n"
        "path = Path(spec.removeprefix('sqlite:///'))\n"
        "print(path, path.is_file())\n"
    )
    path, existed = _run(script)
    assert existed == "True"
    assert Path(path).parent.name.startswith("memwork-store-")
    assert not Path(path).parent.exists()


def test_a_default_sample_legacy_store_lives_as_long_as_its_process(pg_url):
    """No legacy URL: the sample migration's SQLite store is in a temporary folder that its process
    removes when it exits (a notebook kernel, a test worker) -- one was left in /tmp per run."""
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from memwork.samples.migration import build_migration\n"
        "m = build_migration(None, sys.argv[1], n_users=2, items_per_user=3, dimensions=8, seed=1)\n"
        "path = Path(m.source_url.removeprefix('sqlite:///'))\n"
        "print(path, path.is_file(), m.active)\n"
    )
    path, existed, active = _run(script, pg_url)
    assert existed == "True" and int(active) > 0  # the store was there, backfilled, while the process ran
    assert Path(path).parent.name.startswith("memwork-legacy-")
    assert not Path(path).parent.exists()
