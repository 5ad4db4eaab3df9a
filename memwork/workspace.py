"""The memwork workspace: one folder holding embedded databases, checkpoints and journals.

Defaults to ``./.memwork`` (override with ``MEMWORK_HOME``), so ``make demo`` needs no configuration.

The folder is created lazily, by whatever first writes into it (``path.mkdir(parents=True)`` next to
the write), never by asking where it is: a command refused for bad input, or one that only reads,
leaves no empty workspace behind.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def workspace_dir(create: bool = False) -> Path:
    """The workspace folder: ``$MEMWORK_HOME`` or ``./.memwork``; created only with ``create``
    (a writer creates the subfolder it writes, which creates this one)."""
    path = Path(os.environ.get("MEMWORK_HOME") or ".memwork").expanduser().resolve()
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path


def prepare_workspace_file(path: str | Path) -> None:
    """Create the folder of ``path``, a file about to be opened for writing, when it lies inside the
    workspace (the workspace's SQLite files: SQLite creates a file, never its folder). A path outside
    the workspace is the user's: a missing folder there stays an error, not a typo made real."""
    target = Path(path).expanduser().resolve()
    if target.parent.is_relative_to(workspace_dir()):
        target.parent.mkdir(parents=True, exist_ok=True)


@contextmanager
def using_workspace(path: str | Path | None) -> Iterator[Path]:
    """Make ``path`` the workspace while the block runs (``None``: keep the current one), then restore.

    Scoped, not a lasting ``os.environ`` write: the embedded server, and report kernels (which inherit
    the environment), find the same folder, and the caller's process is left as it was."""
    if path is None:
        yield workspace_dir(create=True)
        return
    saved = os.environ.get("MEMWORK_HOME")
    os.environ["MEMWORK_HOME"] = str(Path(path).expanduser().resolve())
    try:
        yield workspace_dir(create=True)
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


def write_json_file(payload: Any, path: str | Path) -> Path:
    """Write ``payload`` as indented JSON at ``path`` through a temporary file and a rename, so a reader
    never sees half a file; a missing folder is a usage error (``output``), not a traceback."""
    from memwork.errors import UsageError

    path = Path(path)
    if not path.parent.is_dir():
        raise UsageError("output", str(path), "no such folder")
    return replace_text(path, json.dumps(payload, indent=2) + "\n")


def replace_text(path: Path, text: str) -> Path:
    """Write ``text`` at ``path`` through a temporary file of its own in the same folder and a rename:
    a reader never sees half a file, and two writers at once never share a temporary name."""
    import tempfile

    fd, scratch = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(scratch, path)
    except BaseException:
        Path(scratch).unlink(missing_ok=True)
        raise
    return path


def read_json_input(field_name: str, value: str, path: Path, missing: str) -> Any:
    """The JSON a parameter ``field_name`` (given as ``value``) names at ``path``: a file that is not
    there (``missing`` says what was expected) or not JSON is a :class:`~memwork.errors.UsageError`
    naming the field and the value, read before anything is judged."""
    from memwork.errors import UsageError

    if not path.is_file():
        raise UsageError(field_name, value, missing)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(field_name, value, f"not JSON ({exc})") from exc
