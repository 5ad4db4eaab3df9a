"""The packages a report's kernel imports load only what they are asked for (issue 20: a report's fixed
cost). ``memwork.defrag`` and ``memwork.reports`` serve their public names lazily (PEP 562); these tests
fail when an eager import comes back, and check that every public name is still served as before."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

LAZY_PACKAGES = ("memwork.defrag", "memwork.reports")


def _loaded_after(code: str, watched: tuple[str, ...]) -> list[str]:
    """Of ``watched``, the modules a fresh interpreter has loaded after running ``code``."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(m for m in {watched!r} if m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_memwork_defrag_loads_no_submodule_and_no_scikit_learn():
    watched = ("sklearn", "scipy", "pandas", "memwork.defrag.calibrate", "memwork.defrag.label_free",
               "memwork.defrag.review_queue", "memwork.defrag.actions",
               "memwork.defrag.findings")  # fmt: skip
    assert _loaded_after("import memwork.defrag", watched) == []


def test_the_health_notebooks_imports_skip_what_the_report_does_not_use():
    """The import cell of ``health_report.ipynb`` (and its last cells' imports): no scikit-learn, no
    review queue or calibration, no runner or nbformat (the parent writes the notebook), no plotting
    or pandas before a figure or a table is asked for."""
    code = (
        "from memwork.defrag.report import health_report\n"
        "from memwork.reports.charts import bar_chart\n"
        "from memwork.reports.display import Table, bar_figure, check_file, check_range, fields, show\n"
        "from memwork.reports.standalone import begin, given_names\n"
        "from memwork.reports import real_value, record, gate_on_verdict\n"
        "from memwork.defrag import health_band\n"
    )
    watched = ("sklearn", "matplotlib", "pandas", "nbformat", "papermill", "sqlalchemy",
               "memwork.defrag.calibrate", "memwork.defrag.label_free", "memwork.defrag.review_queue",
               "memwork.defrag.review_report", "memwork.reports.runner", "memwork.reports.index")  # fmt: skip
    assert _loaded_after(code, watched) == []


def test_the_health_report_is_computed_and_shown_without_pandas_matplotlib_or_scipy(tmp_path):
    """What the health notebook's cells do -- read a SQL store, compute the report, draw its three bar
    charts and show its tables (HTML and plain text) -- loads none of the three: they were most of a
    report's fixed cost in its kernel (issue 20)."""
    store = f"sqlite:///{tmp_path / 'entries.db'}"
    code = (
        "from memwork.samples.entries import generate_entries\n"
        "from memwork.stores import open_store\n"
        f"opened = open_store({store!r}, create=True)\n"
        "opened.put_many(generate_entries(60, scopes=['a', 'b'], seed=1))\n"
        "opened.close()\n"
        "from memwork.defrag.report import health_report\n"
        "from memwork.reports.charts import bar_chart\n"
        "from memwork.reports.display import Table, fields\n"
        f"report = health_report({store!r}, age_days=1)\n"
        "charts = [bar_chart(report.coverage(), 'Coverage', limit=100, unit=' %'),\n"
        "          bar_chart(report.health['by_type'], 'Entries by type', ylabel='type')]\n"
        "assert all(c.img_html().startswith('<img src=\"data:image/svg+xml;base64,') for c in charts)\n"
        "tables = [Table(rows, limit=25) for rows in report.tables().values()] + [fields(report.size())]\n"
        "assert sum(bool(t.rows) for t in tables) >= 3, [t.total for t in tables]\n"
        "shown = [(t._repr_html_(), repr(t)) for t in tables]\n"
    )
    watched = ("pandas", "matplotlib", "scipy", "sklearn", "yaml", "filelock")
    assert _loaded_after(code, watched) == []


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_every_public_name_is_served_from_its_submodule(package):
    module = importlib.import_module(package)
    exports = module._EXPORTS
    assert sorted(module.__all__) == sorted(exports), "__all__ and _EXPORTS list the same names"
    for name, submodule in exports.items():
        defining = importlib.import_module(f"{package}.{submodule}")
        assert getattr(module, name) is getattr(defining, name), name
    namespace: dict[str, object] = {}
    exec(f"from {package} import *", namespace)  # the star import a notebook may use
    assert set(module.__all__) <= set(namespace)
    with pytest.raises(AttributeError, match="no_such_name"):
        module.no_such_name  # noqa: B018


def test_a_name_that_is_also_a_submodule_stays_the_function():
    """``calibrate`` is a function and a submodule: importing the submodule first (as the review
    report does) must not leave the package's ``calibrate`` the module."""
    code = (
        "import memwork.defrag.calibrate as loaded\n"
        "from memwork.defrag import calibrate\n"
        "import memwork.defrag\n"
        "print(callable(calibrate), callable(memwork.defrag.calibrate), callable(loaded))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True", "True"]
