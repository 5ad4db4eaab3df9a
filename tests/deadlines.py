"""Deadline assertions that a loaded machine cannot fail, and a slow server that proves the point.

A test of deadline behaviour over a real socket cannot inject a clock into the kernel, so it asks two
questions whose answers do not depend on how busy the machine is:

* did the deadline decide the answer? -- the reason names the timeout (``timed out after N ms``);
* did the caller *not* wait for the slow server? -- the slow fake sleeps :data:`SLOW_FACTOR` deadlines
  (:func:`slow_delay`), and the answer came back in less than half of that (:func:`within_deadline`).

The bound is derived from the configured deadline (ten deadlines), never a constant in seconds: a
scheduler stall of a few hundred milliseconds on a 2-core machine shared by several test runs does not
fail it, while an adapter that ignores its deadline (and waits the whole delay) still does. The exact
deadline arithmetic (queueing, shedding, the commit gate) is tested on an injected clock in
``tests/test_worker_pool.py``.
"""

from __future__ import annotations

#: a slow fake server answers after this many deadlines (interrupted when the fake is torn down)
SLOW_FACTOR = 20


def slow_delay(deadline_s: float) -> float:
    """The delay of a slow fake server for a call under ``deadline_s``: far beyond the deadline."""
    return SLOW_FACTOR * deadline_s


def bound(deadline_s: float) -> float:
    """The longest a call under ``deadline_s`` may take: half the slow server's delay."""
    return slow_delay(deadline_s) / 2


def within_deadline(elapsed_s: float, deadline_s: float) -> bool:
    """True when a call under ``deadline_s`` came back without waiting for a slow server."""
    return elapsed_s < bound(deadline_s)
