"""The rollout canary against a running memwork service.

:mod:`memwork.canary.app` (``memwork canary app``): status expectations and a synthetic round trip
through the HTTP API. :mod:`memwork.canary.judge` (``memwork canary judge``): the statistical verdict
on the shadow-read comparison log. :mod:`memwork.canary.stack` (``memwork check stack``): every gate
in one run.
"""
