"""The test command works on a fresh clone and after `make demo`: scripts/test.sh installs what is missing, and
README, Makefile and .ci/run all run that one command.

Here: those of its tests that run in-process; the others are in tests/integration/test_dev_setup.py."""

import re

from tests.integration.test_dev_setup import REPO


def test_readme_makefile_and_ci_run_the_same_test_command():
    readme = (REPO / "README.md").read_text()
    tests = readme[readme.index("\n## Tests") :]
    assert re.search(r"^make test\b", tests, re.M), "README's Tests section names make test"
    assert "make test" in readme[: readme.index("\n## ", readme.index("\n## ") + 1)], "make test near the top"
    assert re.search(r"^test:\n\tVENV=\$\(VENV\) bash scripts/test\.sh$", (REPO / "Makefile").read_text(), re.M)
    assert re.search(r"^bash scripts/test\.sh\b", (REPO / ".ci" / "run").read_text(), re.M)
    script = (REPO / "scripts" / "test.sh").read_text()
    assert 'exec "$PY" -m pytest -m "not gpu" "$@"' in script and "scripts/dev_missing.py" in script
    # its three runs take every "not gpu" test once: the SERIAL ones one at a time beside the rest over workers at
    # the idle priority, then the real-vLLM ones in one process (the shared server's tests on one server)
    assert "os.SCHED_IDLE" in script
    assert '-m "not gpu and not vllm and not serial" -n "$workers"' in script
    assert '-m "not gpu and vllm and not serial" "$@"' in script
    assert '-m "not gpu and serial" "$@"' in script
