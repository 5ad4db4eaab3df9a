"""Passwords in report parameters never reach an artifact.

The runner injects a *redacted* copy of the parameters into the notebook (so papermill's
injected-parameters cell and ``metadata.papermill.parameters`` show ``user:***@host``) and hands the
real values to the kernel in ``MEMWORK_REPORT_SECRETS`` (JSON, name -> value). A notebook's
validation cell puts them back with :func:`real_value` (or :func:`call_with_parameters` does, for a
notebook making one library call); run standalone (papermill, nbval) the
variable is unset and every value stays what was given.

Whatever the kernel prints is scrubbed on its way to disk: :class:`Scrubber` replaces each secret
(the whole URL by its redacted form, the password alone by ``***``) in the notebook papermill
writes (through :data:`SCRUBBED_SCHEME`, a papermill I/O handler), in summary.json, in the HTML
and in the error line.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from memwork.redaction import REDACTED, assignment_secrets, redact_text, redact_value, url_secrets

if TYPE_CHECKING:  # nbformat only where notebooks are written: a report's kernel never needs it
    import nbformat

T = TypeVar("T")

SECRETS_ENV = "MEMWORK_REPORT_SECRETS"
#: shorter password fragments are only hidden as part of their URL (a 3-letter password replaced
#: everywhere would garble the notebook, base64 figures included)
MIN_FRAGMENT_CHARS = 6
SCRUBBED_SCHEME = "memwork-scrubbed://"


def shown_value(name: str, value: Any) -> Any:
    """A parameter value as an artifact may show it (strings redacted, other values as they are)."""
    return redact_value(name, value) if isinstance(value, str) else value


def split_secrets(params: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """(the parameters as shown, the real value of each one that redaction changed)."""
    shown = {name: shown_value(name, value) for name, value in params.items()}
    secrets = {name: value for name, value in params.items() if shown[name] != value}
    return shown, secrets


def secrets_from_env() -> dict[str, str]:
    """The real values the runner passed to this kernel (empty outside the runner)."""
    try:
        data = json.loads(os.environ.get(SECRETS_ENV) or "{}")
    except ValueError:
        return {}
    return {str(k): v for k, v in data.items() if isinstance(v, str)} if isinstance(data, dict) else {}


def real_value(name: str, value: Any) -> Any:
    """Inside a report kernel: the real value of parameter ``name`` when ``value`` is its redacted copy.

    Only a value that *is* the redacted form of the secret is replaced, so a notebook run by hand
    with other values keeps them.
    """
    real = secrets_from_env().get(name)
    if real is not None and isinstance(value, str) and shown_value(name, real) == value:
        return real
    return value


def call_with_parameters(function: Callable[..., T], namespace: Mapping[str, Any]) -> T:
    """Call ``function`` with each of its keyword parameters taken from ``namespace`` (a notebook's
    ``globals()``), passwords put back with :func:`real_value`.

    A notebook then makes its one library call without listing its parameters a second time: the
    parameters cell declares them, the library function's signature names the ones it takes.
    A keyword the namespace lacks keeps the function's default.
    """
    from memwork.reports.standalone import begin

    begin(dict(namespace))  # an unknown parameter name is refused; plain papermill gets a run folder
    names = [
        p.name
        for p in inspect.signature(function).parameters.values()
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    return function(**{n: real_value(n, namespace[n]) for n in names if n in namespace})


class Scrubber:
    """Replace every known secret in text and JSON-like data; then hide any URL password left."""

    def __init__(self, secrets: Mapping[str, str] | None = None) -> None:
        pairs: dict[str, str] = {}
        for name, real in (secrets or {}).items():
            if "://" in real or len(real) >= MIN_FRAGMENT_CHARS:
                pairs[real] = str(shown_value(name, real))
            for part in [*url_secrets(real), *assignment_secrets(real)]:
                if len(part) >= MIN_FRAGMENT_CHARS:
                    pairs.setdefault(part, REDACTED)
        # longest first: the whole URL before the password inside it
        self.pairs = sorted(pairs.items(), key=lambda kv: -len(kv[0]))

    @classmethod
    def from_env(cls) -> Scrubber:
        return cls(secrets_from_env())

    def text(self, text: str) -> str:
        for real, shown in self.pairs:
            if real in text:
                text = text.replace(real, shown)
        return redact_text(text) if "://" in text else text

    def data(self, value: Any) -> Any:
        """A copy of dicts/lists/strings with every string scrubbed (keys included)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return type(value)((self.data(k), self.data(v)) for k, v in value.items())
        if isinstance(value, (list, tuple)):
            return [self.data(v) for v in value]
        return value

    def notebook(self, nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
        import nbformat

        return nbformat.from_dict(self.data(nb))


class _ScrubbingHandler:
    """papermill I/O handler for ``memwork-scrubbed:///path``: notebooks scrubbed before each write."""

    def __init__(self) -> None:
        self.scrubbers: dict[str, Scrubber] = {}

    @staticmethod
    def local(path: str) -> str:
        return path[len(SCRUBBED_SCHEME) :] if path.startswith(SCRUBBED_SCHEME) else path

    def read(self, path: str) -> str:
        with open(self.local(path), encoding="utf-8") as fh:
            return fh.read()

    def listdir(self, path: str) -> list[str]:
        return os.listdir(self.local(path))

    def pretty_path(self, path: str) -> str:
        return self.local(path)

    def write(self, buf: str, path: str) -> None:
        import nbformat

        local = self.local(path)
        nb = nbformat.reads(buf, as_version=4)
        scrubber = self.scrubbers.get(local) or Scrubber()
        nb = scrubber.notebook(nb)
        meta = nb.metadata.get("papermill")
        if meta is not None and isinstance(meta.get("output_path"), str):
            meta["output_path"] = self.local(meta["output_path"])
        with open(local, "w", encoding="utf-8") as fh:
            fh.write(nbformat.writes(nb))


_HANDLER = _ScrubbingHandler()
_registered = False


def scrubbed_output(path: str, scrubber: Scrubber) -> str:
    """The papermill output path that writes ``path`` through ``scrubber`` (handler registered once)."""
    from papermill.iorw import papermill_io

    global _registered
    if not _registered:
        papermill_io.register(SCRUBBED_SCHEME, _HANDLER)
        _registered = True
    _HANDLER.scrubbers[path] = scrubber
    return SCRUBBED_SCHEME + path


def release_output(path: str) -> None:
    _HANDLER.scrubbers.pop(path, None)
