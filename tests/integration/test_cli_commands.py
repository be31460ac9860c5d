"""`evalkit tasks list|show` and `evalkit report` (single and comparison) through the CLI, and how the command's
process ends."""

import subprocess
import sys

from evalkit.testing.server import Behaviour, TestServer


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evalkit.cli", *args], capture_output=True, text=True, timeout=300)


def test_tasks_list_and_show():
    p = cli("tasks", "list")
    assert p.returncode == 0
    assert "gsm8k" in p.stdout and "aime25" in p.stdout and "lm-eval" in p.stdout
    # a header, and every column starts where its heading does (no name pushes its row's columns along)
    head, *rows = p.stdout.splitlines()
    assert head.split() == ["name", "kind", "version", "description"]
    starts = [head.index(h) for h in ("kind", "version", "description")]
    for row in rows:
        assert all(row[i - 2 : i] == "  " and row[i] != " " for i in starts), (head, row)
    p = cli("tasks", "show", "aime25")
    assert p.returncode == 0, p.stderr
    assert "4213712e99507f03469175b1cbfb02cd7746c34b04f28e1ea62290626a582e5d" in p.stdout
    assert "pass@8" in p.stdout and "\\boxed{}" in p.stdout and '"num_samples": 8' in p.stdout
    p = cli("tasks", "show", "aime24")
    assert p.returncode == 2 and "did you mean 'aime25'" in p.stderr


def test_report_rerender_and_compare(tmp_path):
    runs = []
    for ratio in (0.3, 0.7):
        with TestServer(Behaviour(correct_ratio=ratio)) as srv:
            out = tmp_path / f"run{ratio}"
            p = cli("run", "gsm8k", "--endpoint", srv.url, "--limit", "12", "--max-tokens", "64", "-o", str(out), "-q")
            assert p.returncode == 0, p.stderr
            assert (out / "report.html").stat().st_size > 10_000
            runs.append(out)
    (runs[0] / "report.html").unlink()
    p = cli("report", str(runs[0]))
    assert p.returncode == 0, p.stderr
    html = (runs[0] / "report.html").read_text()
    assert "exact_match" in html and "http://" not in html.split("</head>")[0].replace("http://127.0.0.1", "")
    cmp_path = tmp_path / "compare.html"
    p = cli("report", str(runs[0]), str(runs[1]), "-o", str(cmp_path))
    assert p.returncode == 0, p.stderr
    text = cmp_path.read_text()
    assert "Pareto" in text and "run0.3" in text and "run0.7" in text


EXIT_PROBE = """
import atexit, sys
import evalkit.cli

class Teardown:
    def __del__(self):
        print("interpreter teardown ran", flush=True)

kept = Teardown()
atexit.register(lambda: print("exit handler ran"))
sys.argv = ["evalkit", *sys.argv[1:]]
evalkit.cli.main()
"""


def test_the_command_ends_without_the_interpreters_teardown_but_runs_exit_handlers():
    # the teardown of every module and object took 0.1-0.25 s after a run; exit handlers (a vLLM evalkit started
    # is stopped by one) and the exit code stay
    for args, code, out in ((["--version"], 0, "evalkit "), (["tasks", "show", "aime24"], 2, "")):
        p = subprocess.run([sys.executable, "-c", EXIT_PROBE, *args], capture_output=True, text=True, timeout=60)
        assert p.returncode == code, p.stderr
        assert out in p.stdout and "exit handler ran" in p.stdout
        assert "interpreter teardown ran" not in p.stdout
