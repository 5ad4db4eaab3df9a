"""Is the rollout safe? Every check a rollout runs, in one package.

==================  ===================================================================================
module              what it answers (command)
==================  ===================================================================================
``roundtrip``       the synthetic round trip the checks share: one step type, one synthetic exchange
``smoke``           does one backend answer, straight to it? (``smoke pgvector``, ``smoke external``)
``selfcheck``       does the configured facade round-trip a synthetic user? (``check health``)
``app_canary``      does the *running* service? status expectations and a round trip over HTTP
                    (``canary app``)
``stack``           every gate of a deployment in one table (``check stack``)
``gates``           the in-process canary: status, fallback, latency and input gates against the
                    legacy and target databases (the ``canary_signoff`` report without a log)
``comparisons``     the shadow-read comparison log, read strictly
``stats``           the judge's statistics: pure functions of samples
``judge``           metrics classified and decided: GO, NO-GO or INCONCLUSIVE (statistics only)
``signoff``         the one sign-off block and its digests (who, when, which code, which inputs)
``run``             the ``canary_signoff`` report's one entry point and the judge's inputs
                    (``canary judge``)
==================  ===================================================================================

It sits above the service, the facade, the migration and the backends, and below the CLI and the
notebooks; what a notebook shows of a result is :mod:`memwork.reports.signoff_view`.
"""
