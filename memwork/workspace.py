"""The memwork workspace: one folder holding embedded databases, checkpoints and journals.

Defaults to ``./.memwork`` (override with ``MEMWORK_HOME``), so ``make demo`` needs no configuration.
"""

from __future__ import annotations

import os
from pathlib import Path


def workspace_dir(create: bool = True) -> Path:
    """The workspace folder: ``$MEMWORK_HOME`` or ``./.memwork``."""
    path = Path(os.environ.get("MEMWORK_HOME") or ".memwork").expanduser().resolve()
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path
