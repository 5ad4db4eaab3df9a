"""A ``python3`` kernelspec that runs the *current* interpreter, made on demand.

A stock ``python3`` kernelspec says ``python -m ipykernel_launcher`` and so depends on PATH: from a
venv run without activation it would start another Python without memwork. The runner writes its
own spec (argv = ``sys.executable``) and puts it first on ``JUPYTER_PATH`` for the run, so nobody
has to install a kernelspec by hand. The spec lives in a temporary folder for the run: a report run
writes nothing into the workspace that it does not need (a refused parameter leaves nothing at all).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

KERNEL_NAME = "python3"


def ensure_kernelspec(root: Path) -> Path:
    """Write ``<root>/kernels/python3/kernel.json`` for this interpreter; return ``root``."""
    spec_dir = root / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        # log level CRITICAL: not "running over TCP without encryption" on every report's stderr, nor
        # "KeyboardInterrupt caught in kernel" (jupyter_client interrupts every kernel it shuts down,
        # and the SIGINT sometimes lands in a message handler). A failing cell still reaches the
        # runner through papermill, with its error.
        "argv": [
            sys.executable,
            "-m",
            "ipykernel_launcher",
            "--IPKernelApp.log_level=CRITICAL",
            "-f",
            "{connection_file}",
        ],
        "display_name": f"Python 3 (memwork, {sys.executable})",
        "language": "python",
        "metadata": {"debugger": False},
    }
    path = spec_dir / "kernel.json"
    text = json.dumps(spec, indent=1)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return root


@contextmanager
def kernel_environment(extra_env: dict[str, str]) -> Iterator[None]:
    """Our kernelspec (in a temporary folder) first on JUPYTER_PATH plus ``extra_env`` for the kernel,
    restored afterwards."""
    with (
        tempfile.TemporaryDirectory(prefix="memwork-kernel-") as folder,
        _environment(ensure_kernelspec(Path(folder)), extra_env),
    ):
        yield


@contextmanager
def _environment(root: Path, extra_env: dict[str, str]) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in ["JUPYTER_PATH", *extra_env]}
    old_path = saved["JUPYTER_PATH"]
    os.environ["JUPYTER_PATH"] = str(root) + (os.pathsep + old_path if old_path else "")
    os.environ.update(extra_env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
