"""The migration certificate: verification that names every bad row per user, checks each vector against
its model and the index against the resolve query, measures retrieval per user size, and proves it
catches what it claims (:func:`~memwork.certify.selftest.self_test`).

It is the one verification of a migration into pgvector (``memwork verify``, aliases ``certify`` and
``import-verify``), for every source of the one pipeline.

* :mod:`~memwork.certify.canonical` -- the one canonical serialisation (Python and SQL);
* :mod:`~memwork.certify.sides` -- checksums computed in MariaDB/SQLite and PostgreSQL;
* :mod:`~memwork.certify.listing` -- the same from a source's listing: its records mapped as the
  importer writes them;
* :mod:`~memwork.certify.rows` -- per-user checksums, bisection to single rows, per-field diffs;
* :mod:`~memwork.certify.partitioned` -- that per-user pass as key ranges of users on an executor;
* :mod:`~memwork.certify.vectors` -- vectors against their model, the index against the query;
* :mod:`~memwork.certify.retrieval` -- recall@k and underfill by user size;
* :mod:`~memwork.certify.preserved` -- the source's own search against the destination's, per user;
* :mod:`~memwork.certify.listing` -- a source without SQL checksummed through its listing;
* :mod:`~memwork.certify.failures` -- the failures table and ``summary.json``;
* :mod:`~memwork.certify.repair` -- re-copy exactly the keys a run recorded as failed;
* :mod:`~memwork.certify.certificate` -- :func:`certify`, the one call;
* :mod:`~memwork.certify.parameters` -- the ``backfill_verification`` report's parameters as that call.
"""

from memwork.certify.certificate import Certificate, CertifyOptions, certify

__all__ = ["Certificate", "CertifyOptions", "certify"]
