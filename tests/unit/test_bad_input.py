"""Bad input, in-process: each mistake gives exactly one line on stderr (``evalkit: error: ...``) naming the problem
and the fix, exit code 2, no traceback, and nothing already computed is lost. Here the cases that need no server
and no process: ``evalkit gate``, ``evalkit sweep FILE`` and ``evalkit run --config FILE`` fail closed (a
malformed summary field that decides nothing is ignored with a note; the step summary is best effort, the exit
code is the verdict's; settings files nested deep or blown up by aliases are refused), and ``evalkit report -o``
takes a folder and refuses an unwritable place in one line. The commands run in-process (typer's CliRunner; an
exception other than SystemExit fails the test). Against the test server or in a fresh process:
tests/integration/test_bad_input.py."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from evalkit.config.settings_files import MAX_BYTES, MAX_DEPTH, read_settings_file
from evalkit.errors import ConfigError
from evalkit.gating import PolicyError, load_policy, policy_from_dict
from evalkit.gating.policy import MAX_RESAMPLES
from evalkit.gating.result import EXIT_CODES
from tests.cli_errors import ERROR_PREFIX, assert_one_error_line, invoke
from tests.report_fixtures import build_gsm8k_run, build_minimal_run

LENIENT = "rates:\n  max_error_rate: 0.05\nbootstrap:\n  resamples: 500\n"  # the fixtures hold api errors


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A baseline, a candidate of the same accuracy and one with a large drop (200 documents each)."""
    root = tmp_path_factory.mktemp("runs")
    return {
        "base": build_gsm8k_run(root / "base", n=200, seed=0, accuracy=0.78),
        "same": build_gsm8k_run(root / "same", n=200, seed=1, accuracy=0.78),  # another draw: not a copy
        "drop": build_gsm8k_run(root / "drop", n=200, seed=1, accuracy=0.40),
    }


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("gate"))
    return dst


def _edit_task_summary(run_dir: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    path = run_dir / "summary.json"
    summary = json.loads(path.read_text())
    edit(summary["tasks"]["gsm8k"])
    path.write_text(json.dumps(summary))


def _gate_json(out_dir: Path) -> dict[str, Any]:
    data = json.loads((out_dir / "gate.json").read_text())
    assert isinstance(data, dict)
    return data


# ------------------------------------------------------------------------------- case 7: summary fields
@pytest.mark.parametrize(
    "trace",
    [[[0, None]], "abc", [[0]], [["x", 4]], [[0.0, 8], [1.5, True]], [[-1.0, 8]], 7, {"0": 8}],
    ids=["null-limit", "string", "short-pair", "string-time", "bool-limit", "negative-time", "number", "mapping"],
)
def test_malformed_concurrency_trace_is_refused_in_one_line(runs: dict[str, Path], tmp_path: Path, trace: Any) -> None:
    """The trace decides which requests are compared at matched load: a malformed one is refused (exit 2),
    never a traceback (old code: TypeError / ValueError, exit 1, which CI reads as "a rule failed")."""
    cand = _copy(runs["same"], tmp_path / "cand")
    _edit_task_summary(cand, lambda t: t.update(concurrency_trace=trace))
    out = invoke(["gate", str(runs["base"]), str(cand), "-o", str(tmp_path / "out")])
    assert_one_error_line(out, str(cand / "summary.json"), "tasks.gsm8k.concurrency_trace", "[seconds, concurrency]")
    assert not (tmp_path / "out").exists()  # refused before anything is written


def test_a_well_formed_trace_is_still_read(runs: dict[str, Path], tmp_path: Path) -> None:
    cand = _copy(runs["same"], tmp_path / "cand")
    _edit_task_summary(cand, lambda t: t.update(concurrency_trace=[[0.0, 64], [3, 32]]))
    out = invoke(["gate", str(runs["base"]), str(cand), "-o", str(tmp_path / "out")])
    assert out.code in (0, 1), out.stderr
    assert _gate_json(tmp_path / "out")["verdict"] in ("pass", "fail")


@pytest.mark.parametrize(
    ("edit", "where"),
    [
        (lambda t: t.update(concurrency_levels=5), "concurrency_levels is 5, not a list"),
        (lambda t: t.update(concurrency_levels="abc"), "concurrency_levels is 'abc', not a list"),
        (lambda t: t.update(concurrency_levels=[1, {"limit": "x"}]), "concurrency_levels[0] is 1"),
        (lambda t: t["speed"].update(wall_s="abc"), "speed.wall_s is 'abc', not seconds"),
        (lambda t: t["speed"].update(wall_s=-3.0), "speed.wall_s is -3.0, not seconds"),
        (lambda t: t["speed"].update(concurrency=True), "speed.concurrency is True, not a whole number"),
        (lambda t: t.update(speed=[1, 2]), "speed is [1, 2], not a mapping"),
        (lambda t: t.update(metrics="abc"), "metrics is 'abc', not a mapping"),
    ],
    ids=[
        "levels-number",
        "levels-string",
        "levels-entries",
        "wall-string",
        "wall-negative",
        "conc-bool",
        "speed",
        "metrics",
    ],
)
def test_malformed_fields_that_decide_nothing_are_ignored_with_a_note(
    runs: dict[str, Path], tmp_path: Path, edit: Callable[[dict[str, Any]], None], where: str
) -> None:
    """Old code: a traceback (levels 5, speed a list) or the field silently dropped; now the gate decides and
    gate.json's notes say what was ignored in which run."""
    cand = _copy(runs["same"], tmp_path / "cand")
    _edit_task_summary(cand, edit)
    out = invoke(
        ["gate", str(runs["base"]), str(cand), "-p", str(_policy(tmp_path, LENIENT)), "-o", str(tmp_path / "o")]
    )
    data = _gate_json(tmp_path / "o")
    assert out.code == EXIT_CODES[data["verdict"]], out.stderr
    notes = [n for n in data["notes"] if n.startswith("cand: summary.json tasks.gsm8k.")]
    assert len(notes) >= 1 and where in notes[0] and "ignored" in notes[0], data["notes"]


@pytest.mark.parametrize("pair", ["same", "drop"])
def test_unwritable_step_summary_warns_and_keeps_the_verdicts_exit_code(
    runs: dict[str, Path], tmp_path: Path, pair: str
) -> None:
    """Old code: exit 2 ("cannot write the gate's outputs") after gate.json was written, which a CI treating 2
    as "skip" lets through. Now a warning line, and the exit code is the verdict's."""
    (tmp_path / "file").write_text("a regular file")
    policy = str(_policy(tmp_path, LENIENT))
    args = ["gate", str(runs["base"]), str(runs[pair]), "-p", policy]
    plain = invoke([*args, "-o", str(tmp_path / "plain")])
    for target in (tmp_path / "file" / "summary.md", tmp_path):  # under a file; a folder
        out_dir = tmp_path / f"out-{target.name}"
        out = invoke([*args, "-o", str(out_dir)], env={"GITHUB_STEP_SUMMARY": str(target)})
        verdict = _gate_json(out_dir)["verdict"]
        assert verdict == ("pass" if pair == "same" else "fail")
        assert out.code == plain.code == EXIT_CODES[verdict]
        warnings = [line for line in out.stderr.splitlines() if line.strip()]
        assert len(warnings) == 1 and warnings[0].startswith("evalkit: warning: cannot append the gate's summary")
        assert str(target) in warnings[0]


# ------------------------------------------------------------------------------------ case 8: the files
def _policy(tmp_path: Path, text: str, name: str = "policy.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _laughs(levels: int = 9, width: int = 9) -> str:
    """A YAML "billion laughs": each level an alias list of the one before (width**levels leaves)."""
    lines = ['a0: &a0 ["lol"]']
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


# name -> (file name, content, words the one line must hold besides the path)
BAD_FILES: dict[str, tuple[str, bytes, tuple[str, ...]]] = {
    "yaml nested 50,000 deep": ("f.yaml", b"[" * 50_000, ("nests lists or mappings",)),
    "yaml nested 40 deep": ("f.yaml", b"a: " + b"[" * 40 + b"]" * 40 + b"\n", (f"more than {MAX_DEPTH} levels",)),
    "yaml not UTF-8": (
        "f.yaml",
        b"tasks: [gsm8k]\nlimit: \xff\xfe\n",
        ("not UTF-8", "byte 22 is 0xff", "save it as UTF-8"),
    ),
    "yaml aliases (billion laughs)": ("f.yaml", _laughs().encode(), ("anchor (&a0) at line 1", "aliases are refused")),
    "yaml alias only": ("f.yaml", b"a: 1\nb: *x\n", ("alias (*x) at line 2",)),
    "yaml larger than 1 MiB": ("f.yaml", b"# padding\n" * (MAX_BYTES // 10 + 1), ("larger than 1024 KiB",)),
    "yaml .inf": ("f.yaml", b"x: {y: .inf}\n", ("'x.y' is inf", "finite number")),
    "yaml date": ("f.yaml", b"x: 2024-01-01\n", ("'x' is a date", "quote it")),
    "yaml syntax": ("f.yaml", b"x: [1, 2\n", ("does not parse as YAML at line",)),
    "yaml 5000-digit int": ("f.yaml", b"x: " + b"9" * 5000 + b"\n", ("does not parse as YAML",)),
    "toml nested 50,000 deep": ("f.toml", b"x = " + b"[" * 50_000, ("nests lists or mappings",)),
    "toml not UTF-8": ("f.toml", b"x = '\xff'\n", ("not UTF-8",)),
    "toml inf": ("f.toml", b"x = inf\n", ("'x' is inf",)),
    "toml date": ("f.toml", b"x = 1979-05-27\n", ("'x' is a date",)),
    "json nested 50,000 deep": ("f.json", b"[" * 50_000, ("nests lists or mappings",)),
    "json NaN": ("f.json", b'{"x": NaN}', ("'x' is nan",)),
    "json syntax": ("f.json", b'{"x": 1,}', ("does not parse as JSON at line 1",)),
}

COMMANDS: dict[str, Callable[[Path, Path], list[str]]] = {
    "gate": lambda file, tmp: ["gate", str(tmp / "base"), str(tmp / "cand"), "--policy", str(file)],
    "sweep": lambda file, tmp: ["sweep", str(file), "-o", str(tmp / "sweep")],
    "run --config": lambda file, tmp: ["run", "gsm8k", "--config", str(file), "-o", str(tmp / "run")],
}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("case", list(BAD_FILES))
def test_bad_settings_file_is_one_line_exit_2(tmp_path: Path, command: str, case: str) -> None:
    """Old code: RecursionError / UnicodeDecodeError tracebacks (exit 1), aliases expanded (gigabytes of RSS),
    non-finite values passed to pydantic; now one line naming the file and the fix, before anything runs."""
    name, content, needles = BAD_FILES[case]
    file = tmp_path / name
    file.write_bytes(content)
    t0 = time.monotonic()
    out = invoke(COMMANDS[command](file, tmp_path))
    assert time.monotonic() - t0 < 10
    assert_one_error_line(out, str(file), *needles)
    assert not any((tmp_path / d).exists() for d in ("sweep", "run"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("bootstrap: {seed: -1}", "'bootstrap.seed': Input should be greater than or equal to 0 (got -1)"),
        (f"bootstrap: {{seed: {2**32}}}", f"'bootstrap.seed': Input should be less than {2**32}"),
        ("bootstrap: {resamples: 100000000000}", f"less than or equal to {MAX_RESAMPLES} (got 100000000000)"),
        ("bootstrap: {resamples: 5000.0}", "'bootstrap.resamples': Input should be a valid integer"),
        ("accuracy: {default: {max_drop: true}}", "'accuracy.default.max_drop': Input should be a valid number"),
        ("accuracy: {default: {alpha: '0.05'}}", "'accuracy.default.alpha': Input should be a valid number"),
        ("speed: {ttft_p50_ms: {max_change: .inf}}", "'speed.ttft_p50_ms.max_change' is inf; give a finite number"),
        ("rates: {max_error_rate: yes}", "'rates.max_error_rate': Input should be a valid number"),
        ("speed: {min_requests: true}", "'speed.min_requests': Input should be a valid integer"),
        ("require_matched_load: 1", "'require_matched_load': Input should be a valid boolean"),
        ("expected: [{task: 25, metric: avg@8, value: 0.9}]", "'expected.0.task': Input should be a valid string"),
        (
            "x: &rule {max_drop: 0.02}\naccuracy: {tasks: {gsm8k: {m: *rule}}}",
            "uses an anchor (&rule) at line 1",
        ),
    ],
)
def test_bad_policy_values_exit_2_in_one_line(runs: dict[str, Path], tmp_path: Path, text: str, message: str) -> None:
    """Old code: seed -1 a traceback; resamples 10**11 a hang; true read as 1.0, .inf and anchors accepted."""
    policy = _policy(tmp_path, text + "\n")
    t0 = time.monotonic()
    out = invoke(["gate", str(runs["base"]), str(runs["same"]), "-p", str(policy), "-o", str(tmp_path / "o")])
    assert time.monotonic() - t0 < 10  # the bound is checked before any bootstrap runs
    assert_one_error_line(out, f"policy file {policy}", message)
    assert not (tmp_path / "o").exists()


def test_policy_api_refuses_the_same_values() -> None:
    """policy_from_dict (the Python API, the watch's default) types values as strictly as the file."""
    for data, loc in [
        ({"bootstrap": {"seed": -1}}, "bootstrap.seed"),
        ({"accuracy": {"default": {"max_drop": True}}}, "accuracy.default.max_drop"),
        ({"speed": {"ttft_p50_ms": {"max_change": float("inf")}}}, "speed.ttft_p50_ms.max_change"),
        ({"bootstrap": {"resamples": MAX_RESAMPLES + 1}}, "bootstrap.resamples"),
    ]:
        with pytest.raises(PolicyError, match=f"'{loc}'"):
            policy_from_dict(data)
    ok = policy_from_dict({"accuracy": {"default": {"max_drop": 0}}, "bootstrap": {"resamples": MAX_RESAMPLES}})
    assert ok.accuracy.default.max_drop == 0.0 and ok.bootstrap.resamples == MAX_RESAMPLES  # an int is a float


def test_the_largest_allowed_resamples_finish(runs: dict[str, Path], tmp_path: Path) -> None:
    """The bound keeps the bootstrap finite: MAX_RESAMPLES over 200 items takes seconds."""
    policy = _policy(tmp_path, f"{LENIENT.split('bootstrap')[0]}bootstrap: {{resamples: {MAX_RESAMPLES}}}\n")
    t0 = time.monotonic()
    out = invoke(["gate", str(runs["base"]), str(runs["same"]), "-p", str(policy), "-o", str(tmp_path / "o")])
    assert out.code == 0, out.stderr
    assert time.monotonic() - t0 < 120


def test_sweep_file_values_are_typed_strictly(tmp_path: Path) -> None:
    """Old code read ``limit: true`` as 1 and ``temperature: true`` as 1.0."""
    for text, loc in [
        ("tasks: [x]\nendpoint: http://h/v1\nlimit: true\n", "limit"),
        ("tasks: [x]\nendpoint: http://h/v1\nsampling: {t: {temperature: true}}\n", "sampling.t.temperature"),
    ]:
        file = _policy(tmp_path, text, "sweep.yaml")
        out = invoke(["sweep", str(file), "-o", str(tmp_path / "o")])
        line = assert_one_error_line(out, f"sweep file {file}", loc)
        assert line.startswith(ERROR_PREFIX)


def test_good_files_in_each_format_still_read(tmp_path: Path) -> None:
    """YAML (a UTF-8 BOM and merge keys without aliases included), TOML and JSON give the same plain data."""
    want = {"tasks": ["gsm8k"], "limit": 5, "temperature": 0.5, "server": {"env": {"A": "1"}}}
    files = {
        "c.yaml": "\ufefftasks: [gsm8k]\nlimit: 5\ntemperature: 0.5\nserver: {env: {A: '1'}}\n",
        "c.toml": 'tasks = ["gsm8k"]\nlimit = 5\ntemperature = 0.5\n[server.env]\nA = "1"\n',
        "c.json": json.dumps(want),
    }
    for name, text in files.items():
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        assert read_settings_file(path, "config file", ConfigError) == want
    assert read_settings_file(_policy(tmp_path, "", "empty.yaml"), "config file", ConfigError) == {}
    merged = read_settings_file(_policy(tmp_path, "x:\n  <<: {a: 1}\n  b: 2\n", "m.yaml"), "config file", ConfigError)
    assert merged == {"x": {"a": 1, "b": 2}}
    assert load_policy(_policy(tmp_path, "bootstrap: {resamples: 200, seed: 4294967295}\n")).bootstrap.seed == 2**32 - 1


# ---------------------------------------------------------------------------------------------- report
def test_report_into_a_folder_writes_the_usual_name_there(tmp_path: Path) -> None:
    run_a, run_b = build_minimal_run(tmp_path / "a"), build_minimal_run(tmp_path / "b")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    single = invoke(["report", str(run_a), "-o", str(out_dir)])
    assert single.code == 0, single.stderr
    assert single.stdout.strip() == str(out_dir / "report.html") and (out_dir / "report.html").stat().st_size
    both = invoke(["report", str(run_a), str(run_b), "-o", str(out_dir)])
    assert both.code == 0, both.stderr
    assert both.stdout.strip() == str(out_dir / "compare.html") and (out_dir / "compare.html").stat().st_size


@pytest.mark.parametrize("runs", [1, 2], ids=["report", "compare"])
def test_report_to_an_unwritable_place_is_one_line(runs: int, tmp_path: Path) -> None:
    dirs = [str(build_minimal_run(tmp_path / f"r{i}")) for i in range(runs)]
    (tmp_path / "file").write_text("not a folder")
    target = tmp_path / "file" / "x.html"
    out = invoke(["report", *dirs, "-o", str(target)])
    assert_one_error_line(out, f"cannot write the report to {target}", str(tmp_path / "file"), "pass -o")
