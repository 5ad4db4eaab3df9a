"""The package list and the build-time commit, the two packaging settings pyproject.toml cannot express.

Every ``memwork*`` package, plus the repository's ``notebooks/`` folder shipped as the
``memwork.notebooks`` package, so a non-editable install carries the report notebooks (found with
importlib.resources, see memwork/reports/runner.py) while the checkout keeps them at the top level.

``memwork/_build.py`` records the git commit of the checkout a wheel or sdist is built from (``COMMIT``),
so an installed memwork names its code in every report and sign-off (memwork/provenance.py) even when
it runs outside any checkout. It is written into the build folder and the sdist only, never into the
source tree; an editable install reads the checkout's git at run time instead.
Everything else lives in pyproject.toml.
"""

import subprocess
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

ROOT = Path(__file__).resolve().parent
BUILD_FILE = Path("memwork") / "_build.py"


def checkout_commit():
    """HEAD of the checkout being built (``-dirty`` with changed tracked files), or None outside git."""
    try:
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (head + ("-dirty" if dirty else "")) if head else None


def write_build_file(folder):
    """``<folder>/memwork/_build.py`` with the commit; kept as it is when there is no git (a wheel
    built from an sdist keeps the commit the sdist recorded)."""
    commit = checkout_commit()
    if commit is None:
        return
    target = Path(folder) / BUILD_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(
        '"""Written by the build (setup.py): the git commit this memwork was built from."""\n\n'
        f"COMMIT = {commit!r}\n",
        encoding="utf-8",
    )


class BuildPyWithCommit(build_py):
    def run(self):
        super().run()
        if not self.editable_mode:  # an editable install reads the checkout's git when it runs
            write_build_file(self.build_lib)


class SdistWithCommit(sdist):
    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        write_build_file(base_dir)


setup(
    # memwork.embed_data holds no Python, only the embedder's tokenizer files: listed as a package so
    # setuptools ships its data without warning that an importable folder would be left out
    packages=[*find_packages(include=["memwork", "memwork.*"]), "memwork.embed_data", "memwork.notebooks"],
    package_dir={"memwork.notebooks": "notebooks"},
    cmdclass={"build_py": BuildPyWithCommit, "sdist": SdistWithCommit},
)
