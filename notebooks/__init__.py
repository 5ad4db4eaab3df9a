"""The report notebooks, installed as the ``memwork.notebooks`` package (see setup.py).

memwork finds them with ``importlib.resources.files("memwork.notebooks")``, in a checkout and in a
non-editable install alike.
"""
