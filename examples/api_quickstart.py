# %% [markdown]
# # evalkit from Python
#
# The four functions the `evalkit` command calls: `evalkit.run`, `evalkit.open_run`, `evalkit.report` and
# `evalkit.gate`. Run it as a script or cell by cell (`# %%` cells: VS Code, Jupytext):
#
#     python examples/api_quickstart.py [ENDPOINT] [OUT_DIR]      (ENDPOINT "" or none: the test server)
#
# Without ENDPOINT it starts evalkit's deterministic test server (`evalkit.testing`), so it runs anywhere,
# offline, in seconds. OUT_DIR defaults to a temporary folder.

# %%
import contextlib
import sys
import tempfile
from pathlib import Path

import evalkit

endpoint = (sys.argv[1] if len(sys.argv) > 1 else "") or None  # "" also starts the test server
out = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(tempfile.mkdtemp(prefix="evalkit-api-"))
stack = contextlib.ExitStack()
if endpoint is None:
    from evalkit.testing import Behaviour, TestServer

    endpoint = stack.enter_context(TestServer(Behaviour(correct_ratio=0.6))).url

# %% [markdown]
# ## `evalkit.run`: evaluate, write the run dir, get typed results
# Settings are named as in a config file (`evalkit config show` lists them).

# %%
base = evalkit.run("gsm8k", endpoint=endpoint, limit=10, concurrency=4, output_dir=out / "base")
strict = base.summary.tasks["gsm8k"].metrics["exact_match,strict-match"]
lo, hi = strict.ci95 or (float("nan"), float("nan"))
print(f"gsm8k strict-match: {strict.value:.2f} (n={strict.n}, 95% CI {lo:.2f}-{hi:.2f})")
print(f"output tokens/s: {base.summary.tasks['gsm8k'].speed.output_tokens_per_s}")

cand = evalkit.run(["gsm8k", "aime25"], endpoint=endpoint, limit=10, num_samples=2, output_dir=out / "cand")
print(f"aime25 avg@2: {cand.summary.tasks['aime25'].metrics['avg@2'].value:.2f}")

# %% [markdown]
# ## `evalkit.open_run`: read any run dir (manifest, summary, samples as contract records)

# %%
run = evalkit.open_run(out / "cand")
records = list(run.records())
print(f"{run.label}: {len(records)} samples, statuses {sorted({r.status for r in records})}")
print(f"model {run.typed_manifest().model}, tasks {run.task_names()}")

# %% [markdown]
# ## `evalkit.report`: one run's report, or a comparison of several

# %%
print("report:", evalkit.report(out / "cand"))
print("comparison:", evalkit.report([out / "base", out / "cand"], out / "compare.html"))

# %% [markdown]
# ## `evalkit.gate`: the release gate (exit code 0 pass / 1 fail on the command line)

# %%
outcome = evalkit.gate(out / "base", out / "cand", output=out / "gate")
print(f"gate: {outcome.result.verdict} ({len(outcome.result.failed)} of {len(outcome.result.rules)} rules failed)")
print("gate files:", ", ".join(sorted(outcome.files)))

# %%
stack.close()
print(f"run dirs in {out}")
