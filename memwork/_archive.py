"""The commit of a ``git archive`` export: git writes it here (``export-subst`` in .gitattributes).

In a checkout the placeholder stays as it is and means nothing; :mod:`memwork.provenance` reads the
checkout's git, or the build's ``_build.py``, before this.
"""

COMMIT = "$Format:%H$"
