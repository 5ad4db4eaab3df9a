"""A ``python3`` kernelspec that runs the *current* interpreter, made on demand.

A stock ``python3`` kernelspec says ``python -m ipykernel_launcher`` and so depends on PATH: from a
venv run without activation it would start another Python without memwork. The runner writes its
own spec (argv = ``sys.executable``) and puts it first on ``JUPYTER_PATH`` for the run, so nobody
has to install a kernelspec by hand. The spec lives in a temporary folder for the run: a report run
writes nothing into the workspace that it does not need (a refused parameter leaves nothing at all).

The spec starts the kernel through :func:`main` (``python -m memwork.reports.kernel``), which sends
the kernel process's own stderr to a log file in that folder: what a notebook prints reaches the
notebook through ipykernel either way, but ipykernel's and tornado's own logging (a ZMQ socket closed
under a callback while the kernel shuts down, seen in CI) would otherwise land on the caller's stderr
-- unscrubbed, and breaking the one-line refusal of bad input. A kernel that dies has the log's tail
(scrubbed) added to the error instead (:func:`kernel_stderr_tail`).
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
#: the environment variable naming the file the kernel's own stderr goes to (see :func:`main`)
KERNEL_LOG_ENV = "MEMWORK_KERNEL_LOG"
KERNEL_LOG_NAME = "kernel-stderr.log"


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
            "memwork.reports.kernel",
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
def kernel_environment(extra_env: dict[str, str]) -> Iterator[Path]:
    """Our kernelspec (in a temporary folder) first on JUPYTER_PATH plus ``extra_env`` for the kernel,
    restored afterwards; yields the file the kernel's stderr goes to (gone with the folder)."""
    with tempfile.TemporaryDirectory(prefix="memwork-kernel-") as folder:
        log = Path(folder) / KERNEL_LOG_NAME
        with _environment(ensure_kernelspec(Path(folder)), {**extra_env, KERNEL_LOG_ENV: str(log)}):
            yield log


def kernel_stderr_tail(log: Path, lines: int = 20) -> str:
    """The last ``lines`` lines the kernel wrote to its stderr ("" when it wrote none)."""
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


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


def main() -> None:
    """Start an ipykernel whose stderr (file descriptor 2) is the file named by ``MEMWORK_KERNEL_LOG``.

    The redirection comes first, before ipykernel or tornado configure any logging, so every handler
    they make writes to the file. Otherwise this is ``python -m ipykernel_launcher``, which also takes
    the working folder off ``sys.path`` while ipykernel loads (the kernel puts it back).
    """
    if sys.path and (sys.path[0] == "" or Path(sys.path[0]) == Path.cwd()):
        del sys.path[0]
    log = os.environ.get(KERNEL_LOG_ENV)
    if log:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(fd, 2)
        os.close(fd)
    from ipykernel import kernelapp

    kernelapp.launch_new_instance()


if __name__ == "__main__":
    main()
