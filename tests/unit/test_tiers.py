"""The tiers' rules (tests/tiers.py), run in-process by pytester on small test files placed in tier folders: a unit
test that connects or starts a process fails naming the call, one whose fixtures or marks need a higher tier fails
saying where to move it, and each test is marked with its folder's tier."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

CONFTEST = """
import pytest
pytest_plugins = ["tests.tiers"]

@pytest.fixture
def test_server():
    yield "not started: the fixture's name is what the tiers judge"

@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request):
    return request.param
"""
INI = "[pytest]\nmarkers =\n    unit\n    integration\n    system\n    browser\n"


@pytest.fixture
def tree(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makeini(INI)
    for tier in ("unit", "integration", "system"):
        pytester.mkdir(tier)
    return pytester


def _write(tree: pytest.Pytester, path: str, body: str) -> None:
    (tree.path / path).write_text("import os, socket, subprocess, multiprocessing, pytest\n" + body)


def test_a_unit_test_that_connects_fails_naming_the_rule_even_when_it_swallows_the_error(tree: pytest.Pytester) -> None:
    _write(
        tree,
        "unit/test_net.py",
        "def test_connects():\n"
        "    try:\n"
        "        socket.create_connection(('127.0.0.1', 9), timeout=0.2)\n"
        "    except Exception:\n"
        "        pass\n",
    )
    result = tree.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=1)  # the call passes, its teardown fails
    result.stdout.fnmatch_lines(
        ["*tests/unit is in-process only, and this test opened a connection to*move it to tests/integration*"]
    )


@pytest.mark.parametrize(
    ("call", "named"),
    [
        ("subprocess.run(['true'])", "started a subprocess*true"),
        ("os.system('true')", "ran 'true' (os.system)"),
        ("multiprocessing.Process(target=print).start()", "started a child process"),
    ],
)
def test_a_unit_test_that_starts_a_process_fails_naming_the_call(tree: pytest.Pytester, call: str, named: str) -> None:
    _write(tree, "unit/test_proc.py", f"def test_starts():\n    {call}\n")
    result = tree.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1, errors=1)
    result.stdout.fnmatch_lines([f"*tests/unit is in-process only, and this test {named}*"])


def test_a_unit_test_using_the_test_server_fixture_fails_saying_where_to_move_it(tree: pytest.Pytester) -> None:
    _write(tree, "unit/test_srv_u.py", "def test_uses(test_server):\n    pass\n")
    _write(tree, "integration/test_srv.py", "def test_uses(test_server):\n    pass\n")
    result = tree.runpytest_inprocess("-p", "no:cacheprovider", "-rE")
    result.assert_outcomes(passed=1, errors=1)  # failed at setup
    result.stdout.fnmatch_lines(
        ["unit/test_srv_u.py::test_uses uses what tests/unit may not*need integration*move it to tests/integration*"]
    )


def test_a_browser_test_or_a_postgresql_parameter_below_the_system_tier_fails(tree: pytest.Pytester) -> None:
    _write(tree, "integration/test_b.py", "@pytest.mark.browser\ndef test_page():\n    pass\n")
    _write(tree, "unit/test_db_u.py", "def test_db(db_url):\n    pass\n")
    _write(tree, "system/test_db.py", "def test_db(db_url):\n    pass\n")
    result = tree.runpytest_inprocess("-p", "no:cacheprovider", "-rE")
    result.assert_outcomes(passed=3, errors=2)
    result.stdout.fnmatch_lines(
        [
            "integration/test_b.py::test_page uses what tests/integration may not*move it to tests/system*",
            "unit/test_db_u.py::test_db?postgresql? uses what tests/unit may not*move it to tests/system*",
        ]
    )


def test_each_test_is_marked_with_its_folders_tier_and_outside_them_with_the_tier_it_needs(
    tree: pytest.Pytester,
) -> None:
    for tier in ("unit", "integration", "system"):
        _write(tree, f"{tier}/test_{tier}.py", "def test_it():\n    pass\n")
    _write(tree, "test_top.py", "def test_plain():\n    pass\n\ndef test_served(test_server):\n    pass\n")
    for tier, expected in [
        ("unit", ["unit/test_unit.py::test_it", "test_top.py::test_plain"]),
        ("integration", ["integration/test_integration.py::test_it", "test_top.py::test_served"]),
        ("system", ["system/test_system.py::test_it"]),
    ]:
        result = tree.runpytest_inprocess("-p", "no:cacheprovider", "-m", tier, "--collect-only", "-q")
        assert sorted(line for line in result.stdout.lines if "::" in line) == sorted(expected), (
            tier,
            result.stdout.lines,
        )


def test_a_parameter_named_like_a_server_fixture_is_not_a_fixture(tree: pytest.Pytester) -> None:
    _write(tree, "unit/test_p.py", "@pytest.mark.parametrize('server', ['a', 'b'])\ndef test_it(server):\n    pass\n")
    tree.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)
