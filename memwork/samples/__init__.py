"""Synthetic data (and real text read offline) for tests, notebooks and the demo.

One home for generated entries, legacy MySQL rows and their loader, the sample migration the notebooks use,
the demo dataset, and real human-written text (the standard library's docstrings, ``real_text.py``), so
a newcomer finds every sample dataset in one place.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path


def process_temp_folder(prefix: str) -> Path:
    """A new temporary folder removed when this process exits: a sample store or legacy store built
    for a notebook, a test or a REPL session is needed while its process runs and by nobody after
    (one was left in the temporary folder per run, ~25 per test-suite run)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder
