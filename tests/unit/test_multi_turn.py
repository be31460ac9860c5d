"""Multi-turn tool calling (BFCL multi_turn_base): BFCL's backends and checker, the conversation runner over
real HTTP (tool results sent back, earlier turns' reasoning dropped or kept), whole runs on the test server.

Here: those of its tests that run in-process; the others are in tests/integration/test_multi_turn.py."""

from __future__ import annotations

import pytest

from evalkit.scoring.bfcl_exec import Backends, named_arguments, parse_call
from evalkit.scoring.bfcl_multi_turn import check_conversation
from tests.integration.test_multi_turn import TASK, task  # noqa: F401 (helpers and fixtures shared with that file)


def truth_turns(item: dict) -> list[list[list[tuple[str, dict]]]]:
    """The ground truth as a model's conversation: one step per turn holding the turn's calls."""
    out = []
    for turn in item["ground_truth"]:
        calls = [named_arguments(parse_call(c), item["function"]) for c in turn]
        out.append([calls] if calls else [])
    return out


# ------------------------------------------------------------------------------------ backends, checker


def test_backends_run_calls_as_bfcl_does() -> None:
    fs = {"GorillaFileSystem": {"root": {"alex": {"type": "directory", "contents": {"a.txt": {"type": "file",
          "content": "hello"}}}}}}  # fmt: skip
    b = Backends(fs, ["GorillaFileSystem", "MathAPI"])
    assert b([("cat", {"file_name": "a.txt"})]) == ['{"file_content": "hello"}']  # a dict comes back as JSON
    assert b([("nope", {})]) == ["Error during execution: name 'nope' is not defined"]
    assert b([("kill", {})]) == ["Error during execution: Function call kill is not allowed."]
    assert b([("add", {"a": 1, "b": 2})]) == ['{"result": 3}']  # MathAPI (mpmath) runs offline
    assert b([("cat", {"file_name": "a.txt", "extra": 1})])[0].startswith("Error during execution:")
    assert parse_call("sort('f.pdf')") == ("sort", ("f.pdf",), {})
    with pytest.raises(ValueError, match="cannot read the call"):
        parse_call("__import__('os').system('x')")


def test_every_ground_truth_passes_the_checker(task) -> None:  # noqa: F811 (the fixture imported above)
    assert len(task.items) == 200
    for item in task.items:
        assert check_conversation(item, item["ground_truth"], truth_turns(item)) == {"valid": True}, item["id"]


def test_checker_verdicts(task) -> None:  # noqa: F811 (the fixture imported above)
    item = task.items[0]  # turn 1: cd document, mkdir temp, mv final_report.pdf temp; turn 2: cd temp, grep
    gt, turns = item["ground_truth"], truth_turns(item)

    def verdict(model):
        return check_conversation(item, gt, model)

    state = verdict([[turns[0][0][:2]], *turns[1:]])  # the file never moved
    assert (state["error_type"], state["turn"]) == ("state_mismatch", 0)
    assert "GorillaFileSystem" in state["error_message"]
    no_grep = [turns[0], [turns[1][0][:1]], *turns[2:]]  # same state, but grep's result never came back
    response = verdict(no_grep)
    assert (response["error_type"], response["turn"]) == ("response_mismatch", 1)
    assert verdict([turns[0], [], *turns[2:]])["error_type"] == "empty_turn"
    assert verdict(turns[:2])["error_type"] == "force_terminated"
    # calls split over several requests of a turn are the same calls
    assert verdict([[[c] for c in turns[0][0]], *turns[1:]]) == {"valid": True}
