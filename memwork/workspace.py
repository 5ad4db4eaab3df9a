"""The memwork workspace: one folder holding embedded databases, checkpoints and journals.

Defaults to ``./.memwork`` (override with ``MEMWORK_HOME``), so ``make demo`` needs no configuration.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def workspace_dir(create: bool = True) -> Path:
    """The workspace folder: ``$MEMWORK_HOME`` or ``./.memwork``."""
    path = Path(os.environ.get("MEMWORK_HOME") or ".memwork").expanduser().resolve()
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def using_workspace(path: str | Path | None) -> Iterator[Path]:
    """Make ``path`` the workspace while the block runs (``None``: keep the current one), then restore.

    Scoped, not a lasting ``os.environ`` write: the embedded server, and report kernels (which inherit
    the environment), find the same folder, and the caller's process is left as it was."""
    if path is None:
        yield workspace_dir()
        return
    saved = os.environ.get("MEMWORK_HOME")
    os.environ["MEMWORK_HOME"] = str(Path(path).expanduser().resolve())
    try:
        yield workspace_dir()
    finally:
        if saved is None:
            os.environ.pop("MEMWORK_HOME", None)
        else:
            os.environ["MEMWORK_HOME"] = saved


def sha256_file(path: Path) -> str:
    """The hex SHA-256 of a file, read in 1 MiB blocks (model files and report artifacts can be large)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
