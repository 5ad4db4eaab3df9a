"""A secret that is set but blank is a config problem, never "no secret" (the class of F-1 beyond the
service's token): a backend whose API key or password is set to whitespace is unavailable with a reason
naming the variable, instead of silently connecting without credentials."""

from __future__ import annotations

import pytest

from memwork.backends.base import configuration_problems, declaration_of
from memwork.facade.facade import facade_from_env
from memwork.plugins import Registry

BLANKS = ["", " ", "\n", "\t \r\n"]


def _secret_vars() -> list[tuple[str, str]]:
    registry = Registry({}, plugins=[])
    found = []
    for backend in registry.backends():
        decl = declaration_of(backend)
        found += [(decl.name, var.name) for var in decl.variables if var.secret]
    return found


SECRETS = _secret_vars()


def test_every_built_in_secret_is_declared_as_one() -> None:
    names = {name for _backend, name in SECRETS}
    assert {"MEMORY_WEAVIATE_API_KEY", "MEMORY_LANGGRAPH_API_KEY", "MEMORY_QDRANT_API_KEY"} <= names


@pytest.mark.parametrize(("backend", "variable"), SECRETS)
@pytest.mark.parametrize("blank", BLANKS)
def test_a_blank_secret_is_a_problem_naming_it(backend: str, variable: str, blank: str) -> None:
    registry = Registry({}, plugins=[])
    decl = declaration_of(registry.get(backend))
    problems = configuration_problems(decl, {variable: blank})
    mine = [(code, detail) for code, detail in problems if variable in detail]
    assert len(mine) == 1 and mine[0][0].endswith("_blank") and "set but blank" in mine[0][1]
    assert variable not in dict(configuration_problems(decl, {}))  # unset: only "missing" if required


@pytest.mark.parametrize("blank", BLANKS)
def test_an_optional_key_set_blank_makes_the_backend_unavailable(blank: str) -> None:
    env = {"MEMORY_LANGGRAPH_ENABLED": "1", "MEMORY_LANGGRAPH_URL": "http://127.0.0.1:9"}
    facade = facade_from_env(env)
    try:
        row = next(b for b in facade.status()["backends"] if b["name"] == "langgraph")
    finally:
        facade.close()
    assert row["available"] is True  # unset: no key, as configured
    facade = facade_from_env({**env, "MEMORY_LANGGRAPH_API_KEY": blank})
    try:
        row = next(b for b in facade.status()["backends"] if b["name"] == "langgraph")
    finally:
        facade.close()
    assert row["available"] is False and row["reason"].startswith("api_key_blank (MEMORY_LANGGRAPH_API_KEY")
