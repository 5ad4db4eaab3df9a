"""A stopped defrag run says what it wrote and how to undo it -- worded by defrag, carried by errors."""

from memwork.defrag.actions import stopped_run, stopped_run_dict
from memwork.errors import PlanConflict, RunStopped


def _conflict(applied: int) -> PlanConflict:
    return PlanConflict(
        "notes/a.md", "default", "changed since the plan was made", applied=[object()] * applied
    )


def test_a_run_that_wrote_names_each_step_and_the_undo_command():
    steps = [
        {"action": "merge_duplicates", "status": "applied", "changes": 3, "planned": 3},
        {"action": "compact", "status": "stopped", "changes": 1, "planned": 4},
        {"action": "cleanup_stubs", "status": "not run", "changes": 0, "planned": None},
    ]
    stopped = stopped_run(_conflict(1), action="full", run_id="r1", steps=steps)
    assert isinstance(stopped, RunStopped) and stopped.exit_code == 1
    assert str(stopped) == (
        "path='notes/a.md': changed since the plan was made (scope 'default'); the run stopped after "
        "applying 4 changes (merge_duplicates 3, compact 1 of 4); they are journaled and "
        "`memwork defrag undo r1` (same --store) reverts them"
    )
    answer = stopped_run_dict(stopped)
    assert (answer["applied"], answer["complete"], answer["changes_applied"]) == (True, False, 4)
    assert answer["undo"] == "memwork defrag undo r1" and answer["steps"] == steps


def test_a_run_that_wrote_nothing_says_so_and_offers_no_undo():
    steps = [{"action": "compact", "status": "stopped", "changes": 0, "planned": 2}]
    stopped = stopped_run(_conflict(0), action="compact", run_id="r2", steps=steps)
    assert str(stopped).endswith("; nothing was written (run r2); run the action again")
    assert stopped_run_dict(stopped)["undo"] is None
