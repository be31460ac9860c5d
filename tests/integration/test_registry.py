import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_installed_package_finds_tasks_from_another_folder(tmp_path):
    """The console script of a (non-editable) install lists the built-in tasks when run elsewhere."""
    exe = Path(sys.executable).parent / "evalkit"
    if not exe.exists():
        pytest.skip("evalkit console script not installed in this environment")
    out = subprocess.run([str(exe), "tasks", "list"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "gsm8k" in out.stdout and "aime25" in out.stdout
