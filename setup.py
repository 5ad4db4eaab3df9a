"""The package list, the one packaging setting pyproject.toml cannot express.

Every ``memwork*`` package, plus the repository's ``notebooks/`` folder shipped as the
``memwork.notebooks`` package, so a non-editable install carries the report notebooks (found with
importlib.resources, see memwork/reports/runner.py) while the checkout keeps them at the top level.
Everything else lives in pyproject.toml.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["memwork", "memwork.*"]), "memwork.notebooks"],
    package_dir={"memwork.notebooks": "notebooks"},
)
