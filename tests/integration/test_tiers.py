"""The tiers' rules (tests/tiers.py) outside tests/unit: a subprocess is allowed in the integration tier (run
in-process by pytester; here, not in tests/unit, because the inner test really starts one)."""

from __future__ import annotations

import pytest

from tests.unit.test_tiers import CONFTEST, INI

pytest_plugins = ["pytester"]


def test_a_subprocess_is_allowed_in_the_integration_tier(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makeini(INI)
    pytester.mkdir("integration")
    (pytester.path / "integration/test_proc.py").write_text(
        "import subprocess\n\ndef test_starts():\n    assert subprocess.run(['true']).returncode == 0\n"
    )
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)
