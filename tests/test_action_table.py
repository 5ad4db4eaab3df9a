"""The defrag action table (issue 9 point 2): one declaration per action, the CLI generated from it."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from click.testing import CliRunner

from memwork.cli import main
from memwork.cli.defrag import PARTITIONED
from memwork.defrag import ACTIONS, DEFAULTS, Action, Param, register, run_action
from memwork.defrag.table import Step, composite
from memwork.entry import Entry, utcnow
from memwork.errors import UsageError
from memwork.stores.memory import MemoryStore

COMMON = {"--store", "--scope", "--json", "--help", "-h"}
EVERY_PARAM_OPTION = {Param.option(n) for a in ACTIONS.values() for n in a.params}


def help_options(cli_name: str) -> set[str]:
    """Every option the command's --help lists (the declaration column of its Options section)."""
    result = CliRunner().invoke(main, ["defrag", cli_name, "--help"])
    assert result.exit_code == 0, result.output
    declarations = re.findall(r"(?m)^  (-\S.*?)(?:\s{2,}|$)", result.output.split("Options:", 1)[1])
    return {flag for line in declarations for flag in re.findall(r"--?[\w-]+", line)}


def expected_options(action: Action) -> set[str]:
    own = {Param.option(n) for n in action.params}
    if not action.read_only:
        own |= {"--apply", "--lock-timeout"}
    if action.reembeds:
        own.add("--embedder")
    if action.name in PARTITIONED:
        own |= {"--executor", "--checkpoint"}
    return COMMON | own


@pytest.mark.parametrize("name", list(ACTIONS))
def test_help_lists_exactly_the_actions_own_options(name):
    action = ACTIONS[name]
    assert help_options(action.cli_name) == expected_options(action)


def test_the_tables_options_by_hand():
    """Not derived from the table: what the guide's actions take."""
    assert help_options("analyze") == COMMON
    assert help_options("find-duplicates") == COMMON | {
        "--similarity-threshold",
        "--policy",
        "--since",
        "--executor",
        "--checkpoint",
        "--candidates",
        "--k",
        "--ef-search",
        "--recall-sample",
        "--exact-upto",
    }
    assert help_options("compact") - COMMON == {
        "--apply",
        "--lock-timeout",
        "--min-quality-score",
        "--min-age-days",
        "--max-hits",
    }
    assert "--embedder" in help_options("merge-duplicates") and "--embedder" not in help_options("compact")
    assert "--compact-max-hits" in help_options("full") and "--confidence-filter" not in help_options("full")
    assert all("--policy" in help_options(a) for a in ("find-duplicates", "merge-duplicates", "full"))
    assert all("--since" in help_options(a) for a in ("find-duplicates", "find-related", "merge-duplicates"))


@pytest.mark.parametrize("name", list(ACTIONS))
def test_another_actions_option_is_a_click_usage_error(name, tmp_path):
    action = ACTIONS[name]
    foreign = sorted(EVERY_PARAM_OPTION - {Param.option(n) for n in action.params})
    if action.read_only:
        foreign += ["--apply", "--lock-timeout"]
    if not action.reembeds:
        foreign.append("--embedder")
    assert foreign or name == "full"
    for option in foreign:
        args = [option] if option == "--apply" else [option, "1"]
        result = CliRunner().invoke(main, ["defrag", action.cli_name, "--store", str(tmp_path), *args])
        assert result.exit_code == 2, (name, option, result.output)
        assert "No such option" in result.output and option in result.output, (name, option)


def test_full_composes_the_registered_planners():
    full = ACTIONS["full"]
    assert [s.action for s in full.steps] == ["merge_duplicates", "supersede", "cleanup_stubs", "compact"]
    assert all(ACTIONS[s.action].plan is not None for s in full.steps)
    # its parameters are its steps' parameters (compact's max_hits and supersede's min_similarity
    # renamed, supersede's pair fixed: full supersedes what the rule flags), with their defaults
    assert DEFAULTS["full"] == (
        DEFAULTS["merge_duplicates"]
        | {"contradiction_floor": 0.60}
        | DEFAULTS["cleanup_stubs"]
        | {"min_quality_score": 20, "min_age_days": 30, "compact_max_hits": 0}
    )
    assert full.params["compact_max_hits"].check is ACTIONS["compact"].params["max_hits"].check
    assert full.params["contradiction_floor"].check is ACTIONS["supersede"].params["min_similarity"].check
    assert "pair" not in full.params
    assert full.reembeds and full.lists == ()


def test_every_action_is_one_declaration_the_library_dispatches():
    now = utcnow()
    old = now - timedelta(days=400)
    entries = [
        Entry(path="a.md", content="the same words in both entries here", updated_at=old, created_at=old),
        Entry(path="b.md", content="the same words in both entries here", updated_at=old, created_at=old),
    ]
    for name, action in ACTIONS.items():
        extra = {"min_similarity": 0.0} if name in ("find_related", "link_related") else {}
        result = run_action(MemoryStore(entries), name, now=now, **extra)
        data = result.to_dict()
        assert data["action"] == name and list(data["params"]) == list(action.params)
        assert data["dry_run"] is (not action.read_only)
        for listed in action.lists:
            assert listed in data, (name, listed)
        if action.read_only:
            with pytest.raises(UsageError, match="nothing to apply"):
                run_action(MemoryStore(entries), name, apply=True, now=now)


def test_a_parameter_check_and_an_alias_come_from_the_table():
    with pytest.raises(UsageError) as info:
        run_action(MemoryStore([]), "full", compact_max_hits=1.5)
    assert info.value.field == "compact_max_hits" and "whole number" in str(info.value)
    assert run_action(MemoryStore([]), "full", merge_strategy="combine").params["strategy"] == "combine"
    with pytest.raises(UsageError, match="not a parameter of analyze"):
        run_action(MemoryStore([]), "analyze", age_days=3)


def test_register_refuses_a_duplicate_and_a_step_that_is_not_a_planner():
    with pytest.raises(ValueError, match="already registered"):
        register(ACTIONS["analyze"])
    with pytest.raises(ValueError, match="not a registered planner"):
        register(Action("x", "x", {}, read_only=False, steps=(Step("analyze"),)))
    with pytest.raises(ValueError, match="read-only action has find"):
        register(Action("y", "y", {}, read_only=True))
    with pytest.raises(ValueError, match="two steps take"):
        composite("z", "z", (Step("cleanup_stubs"), Step("compact")), helps={})
    with pytest.raises(ValueError, match="no parameter"):
        composite("w", "w", (Step("supersede", fixed={"pairs": None}),), helps={})
    assert "x" not in ACTIONS and "y" not in ACTIONS
