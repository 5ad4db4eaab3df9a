"""Synthetic data for tests, notebooks and the demo.

One home for generated entries, legacy MySQL rows and their loader, the sample migration the notebooks use,
and the demo dataset, so a newcomer finds every fake dataset in one place.
"""
