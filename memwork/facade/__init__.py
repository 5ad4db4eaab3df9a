"""The Memory V2 facade: policy, backend registry, selection, fail-open calls, gates and tools.

Only :mod:`memwork.facade.facade` is imported eagerly by :func:`facade_from_env`; the gates and the
scaffold are separate modules so the host application never pays for them.
"""

from __future__ import annotations

from memwork.facade.facade import MemoryFacade, facade_from_env
from memwork.facade.policy import Policy, policy_from_env

__all__ = ["MemoryFacade", "Policy", "facade_from_env", "policy_from_env"]
