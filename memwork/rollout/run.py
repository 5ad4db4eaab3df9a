"""A rollout sign-off, run: the ``canary_signoff`` report's one entry point, and the judge's inputs.

:func:`run_signoff` takes the report's :class:`~memwork.rollout.signoff.SignoffParameters` (its
notebook builds them from its parameters cell) and returns the verdict: the judge's on shadow reads
when a comparison log or a service is given (:func:`judge_shadow_reads`, also ``memwork canary
judge``), else the in-process gates' (:func:`memwork.rollout.gates.run_gates`).

:func:`judge_log` is the judge over one comparison log file: the log read strictly, the input reports
read (a failing one is a NO-GO reason), the metrics decided by :mod:`memwork.rollout.judge`, the
verdict signed by :func:`~memwork.rollout.signoff.signoff_block`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from memwork.redaction import describe_error, redact_url
from memwork.rollout import isolation
from memwork.rollout.app_canary import bearer_token, fetch_status, same_backend
from memwork.rollout.certificate import read_certificate
from memwork.rollout.comparisons import read_comparison_log
from memwork.rollout.gate_records import judge_gates
from memwork.rollout.gates import GateResult, SampleMigration, canary_env_for, run_gates
from memwork.rollout.judge import Judgement, Thresholds, judge_comparisons, noise_floor, signoff_evidence
from memwork.rollout.roles import declared_ranking
from memwork.rollout.signoff import (
    INPUT_REPORTS,
    InputReport,
    SignoffParameters,
    gate_failures,
    input_gates,
    read_input_report,
    signoff_block,
)
from memwork.service.shadow import default_log_path


def run_signoff(
    parameters: SignoffParameters, *, sample_migration: Callable[[], SampleMigration] | None = None
) -> GateResult | Judgement:
    """The ``canary_signoff`` report's one call: ``parameters`` checked (:class:`UsageError` before
    anything is built or measured), then the judge of shadow reads when they name a log or a service,
    else the in-process gates. With neither database URL the gates measure the migration
    ``sample_migration`` builds (the notebook passes the samples' own; without one it is a usage
    error). The sign-off fingerprints ``parameters`` as given (passwords hidden)."""
    parameters.check()
    if parameters.judges_shadow_reads:
        return judge_shadow_reads(parameters, require_inputs=True)
    return run_gates(canary_env_for(parameters, sample_migration), parameters)


def judge_shadow_reads(parameters: SignoffParameters, *, require_inputs: bool = False) -> Judgement:
    """The judge as ``memwork canary judge`` and the ``canary_signoff`` report call it.

    ``require_inputs`` (the report's sign-off, :func:`run_signoff`): each input report not given is a
    failed gate (NO-GO) unless ``waive`` names it with a reason; without (``memwork canary judge``,
    which judges a log) only the input reports given are gated. A health report given is gated on
    its score (``min_health_score``) either way.

    With ``base_url`` the service's ``/api/runtime/status`` is read first and recorded in the
    sign-off (which backend it serves, which it shadows, at what sample, the shadow counters), so the
    verdict names the deployment it judged; an unreachable service is a NO-GO reason, a malformed URL
    a usage error. The log is ``comparison_log``, else the one that service reports writing (same
    machine), else the one ``memwork serve`` writes by default (:func:`default_log_path`).
    ``primary_backend`` / ``shadow_backend`` select the pair to sign off when the log compares
    several.
    """
    parameters.check_judge()
    base_url, token = parameters.base_url, parameters.token
    if base_url:
        token = bearer_token(token)  # read by the server's rules: an unusable token is bad input, never sent
    service, problem = service_status(base_url, token) if base_url else (None, None)
    served_log = ((service or {}).get("shadow") or {}).get("log")
    log = parameters.comparison_log or (served_log if isinstance(served_log, str) and served_log else "")
    return judge_log(
        log or str(default_log_path()),
        parameters.thresholds(),
        approver=parameters.approver,
        health_summary=parameters.health_summary,
        verification_summary=parameters.verification_summary,
        primary_backend=parameters.primary_backend,
        shadow_backend=parameters.shadow_backend,
        certificate=parameters.certificate,
        certificate_waiver=parameters.certificate_waiver,
        aa_log=parameters.aa_log,
        min_health_score=parameters.min_health_score,
        waive=parameters.waive,
        leak_probes=parameters.leak_probes,
        require_inputs=require_inputs,
        service=service,
        failures=[problem] if problem else [],
        parameters=parameters.as_given(),
        given_explicitly=parameters.changed(),
    )


def judge_log(
    log: str | Path,
    thresholds: Thresholds | None = None,
    *,
    approver: str = "",
    health_summary: str = "",
    verification_summary: str = "",
    primary_backend: str = "",
    shadow_backend: str = "",
    certificate: str = "",
    certificate_waiver: str = "",
    aa_log: str = "",
    min_health_score: int = 60,
    waive: str = "",
    leak_probes: str = "",
    require_inputs: bool = False,
    service: dict[str, Any] | None = None,
    failures: Iterable[str] = (),
    parameters: Mapping[str, Any] | None = None,
    given_explicitly: Mapping[str, Any] | None = None,
) -> Judgement:
    """The whole judge over one comparison log: metrics, verdict, reasons and the sign-off.

    ``certificate``: the migration certificate (a summary.json or its run folder; default: the
    ``verification_summary``), the quality gate when the backends rank differently, unless
    ``certificate_waiver`` gives the reason it is waived; ``aa_log``: a comparison log of the
    baseline against itself, the noise floor; ``min_health_score`` / ``waive`` / ``require_inputs``:
    the gates on the input reports (:func:`~memwork.rollout.signoff.input_gates`: a failed one is a
    NO-GO reason, each is on the strip); ``leak_probes``: the cross-user probes' result file, its
    bound in the sign-off and a NO-GO unless the probes' verdict is GO (none given: a NO-GO only with
    ``require_inputs``, see :mod:`memwork.rollout.isolation`); ``failures``: NO-GO reasons found
    elsewhere (the service's status could not be read); ``service``: what the sign-off records of it;
    ``parameters``: what the sign-off fingerprints (default: these arguments); ``given_explicitly``:
    the parameters set for this run (a gate's threshold origin is ``set`` for those, else ``default``)."""
    th = thresholds or Thresholds()
    th.check()
    explicit = given_explicitly
    given = parameters
    if given is None:
        given = {"comparison_log": str(log), **asdict(th), "approver": approver,
                 "health_summary": health_summary, "verification_summary": verification_summary,
                 "primary_backend": primary_backend, "shadow_backend": shadow_backend,
                 "certificate": certificate, "certificate_waiver": certificate_waiver,
                 "aa_log": aa_log, "min_health_score": min_health_score, "waive": waive,
                 "leak_probes": leak_probes}  # fmt: skip
    named = {"health_summary": health_summary, "verification_summary": verification_summary}
    inputs = {name: read_input_report(name, named[name]) for name in INPUT_REPORTS}
    cert = read_certificate(certificate, "certificate") if certificate else None
    if cert is None and verification_summary:
        cert = read_certificate(verification_summary, "verification_summary", strict=False)
    probes = isolation.read_leak_probes(leak_probes)
    probes_waiver = SignoffParameters(waive=waive).waivers().get(isolation.FIELD, "")
    isolation_failure = isolation.reason(probes, require_inputs, probes_waiver)
    noise = noise_floor(read_comparison_log(aa_log), str(aa_log)) if aa_log else None
    on_inputs = input_gates(
        SignoffParameters(min_health_score=min_health_score, waive=waive),
        inputs,
        required=require_inputs,
        certificate=certificate,
    )
    comparisons = read_comparison_log(log)
    judgement = judge_comparisons(
        comparisons,
        th,
        primary_backend=primary_backend,
        shadow_backend=shadow_backend,
        failures=[
            *failures,
            *input_failures(inputs),
            *gate_failures(on_inputs),
            *([isolation_failure] if isolation_failure else []),
        ],
        same_backend=same_backend,
        noise=noise,
        certificate=cert,
        certificate_waiver=certificate_waiver,
        ranking_of=declared_ranking,
    )
    judgement.gates = [g.to_dict() for g in [*judge_gates(judgement, explicit or {}), *on_inputs]]
    judgement.gates.append(isolation.gate_row(probes, require_inputs, probes_waiver))
    evidence = signoff_evidence(judgement, str(log))
    evidence["isolation"] = isolation.evidence(leak_probes, probes)
    if service is not None:
        evidence["service"] = service
    judgement.signoff = signoff_block(
        judgement.verdict, approver=approver, parameters=given, inputs=inputs, evidence=evidence
    )
    return judgement


def input_failures(inputs: Mapping[str, InputReport | None]) -> list[str]:
    """A NO-GO reason for each input report whose verdict does not let a rollout pass."""
    return [
        f"{name}: report {report.run_id} has verdict {report.verdict}"
        for name, report in inputs.items()
        if report is not None and not report.passed
    ]


def service_status(base_url: str, token: str = "") -> tuple[dict[str, Any], str | None]:
    """What the sign-off records of the service (backends, shadow settings and counters), or why it
    could not be read."""
    shown = redact_url(base_url) or base_url
    try:
        status = fetch_status(base_url, token)
    except Exception as exc:  # any failure is a reason, never a traceback
        return {"base_url": shown, "error": describe_error(exc)}, f"service: {describe_error(exc)}"
    found = status.get("memory")
    memory: dict[str, Any] = found if isinstance(found, dict) else {}
    shadow = status.get("shadow") if isinstance(status.get("shadow"), dict) else None
    keys = ("enabled", "backend", "selectedBackend")
    return {"base_url": shown, **{k: memory.get(k) for k in keys if k in memory}, "shadow": shadow}, None
