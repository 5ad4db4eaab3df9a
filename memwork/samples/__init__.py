"""Synthetic data (and real text read offline) for tests, notebooks and the demo.

One home for generated entries, legacy MySQL rows and their loader, the sample migration the notebooks use,
the demo dataset, and real human-written text (the standard library's docstrings, ``real_text.py``), so
a newcomer finds every sample dataset in one place.
"""
