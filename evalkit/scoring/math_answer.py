r"""Final-answer extraction and verification for integer-answer math benchmarks (AIME).

Extraction and verification are separate steps:

1. :func:`extract_boxed` finds the answer the model committed to: the LAST balanced ``\boxed{…}`` or
   ``\fbox{…}`` of the answer text (never of the reasoning; see :mod:`evalkit.scoring.reasoning`).
2. :func:`verify` compares it with the gold answer: as integers first (after :func:`normalize_integer`
   removes ``$``, ``\text{}``, thousands separators, leading zeros, degree and percent signs…), and only when
   the extracted text is an expression (``\dfrac{140}{2}``) by math-verify, run in a separate process with a
   hard timeout, because sympy can hang on inputs such as ``9^{9^{9^{9}}}`` and math-verify's own
   signal-based timeout only works on the main thread.

:func:`score_answer` runs both and gives the sample's status.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import logging
import queue
import re
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import IO, Any, Literal, NamedTuple

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "AnswerScore",
    "Extraction",
    "canonical_answer",
    "extract_boxed",
    "normalize_integer",
    "score_answer",
    "shutdown_verifier",
    "verify",
]

DEFAULT_TIMEOUT_S = 5.0
# First use: starting the worker process and importing sympy/math-verify (seconds on 2 cores).
STARTUP_TIMEOUT_S = 120.0

log = logging.getLogger(__name__)

# ----------------------------------------------------------------------------------------------- extraction


@dataclass(frozen=True)
class Extraction:
    r"""What :func:`extract_boxed` found.

    ``value`` is the box content, stripped (None when nothing was found); ``method`` is ``"boxed"``
    (``\boxed{…}`` or ``\boxed {…}``), ``"fbox"`` (``\fbox{…}``), ``"boxed_unbraced"`` (``\boxed 588``
    without braces) or ``"none"``.
    """

    value: str | None
    method: str


_BOX_COMMAND = re.compile(r"\\(boxed|fbox)(?![A-Za-z])")


def _box_argument(text: str, start: int) -> tuple[str | None, bool]:
    r"""Argument of the box command ending at ``start``: ``(content, braced)``; content None if unbalanced.

    ``\boxed{…}`` / ``\boxed {…}``: the balanced brace group (escaped ``\{ \}`` count like lighteval's, which
    keeps them balanced). ``\boxed 588$``: as lighteval (Hendrycks MATH's ``last_boxed_only_string``) does,
    everything after the space up to the next ``$``; evalkit also stops at a line break.
    """
    i = start
    n = len(text)
    while i < n and text[i] in " \t":
        i += 1
    if i < n and text[i] == "{":
        depth = 0
        for j in range(i, n):
            c = text[j]
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    return text[i + 1 : j], True
        return None, True  # never closed: cut off, or malformed
    if i == start:  # ``\boxed70``, ``\boxed.``: not an argument lighteval recognises
        return None, False
    m = re.match(r"[^$\n]*", text[i:])
    return (m.group(0) if m else None), False


def extract_boxed(text: str | None) -> Extraction:
    r"""The LAST balanced ``\boxed{…}`` / ``\fbox{…}`` in ``text`` (nested braces kept whole).

    A box that never closes (output cut off inside it) or is empty (``\boxed{}``, typically the instruction
    echoed back) is skipped and the box before it is used. ``\boxed`` nested in ``\boxed`` gives the inner
    content (it is the last one).
    """
    if not text:
        return Extraction(None, "none")
    for m in reversed(list(_BOX_COMMAND.finditer(text))):
        content, braced = _box_argument(text, m.end())
        if content is None or not content.strip():
            continue
        method = m.group(1) if braced else f"{m.group(1)}_unbraced"
        return Extraction(content.strip(), method)
    return Extraction(None, "none")


# ---------------------------------------------------------------------------------------------- normalizing

_UNWRAP = re.compile(
    r"\\(?:text|textbf|textrm|texttt|textnormal|mathrm|mathbf|mathit|mbox|boxed|fbox|operatorname)\s*\{([^{}]*)\}"
)
_DROP = (
    r"^{\circ}",
    r"^\circ",
    r"\circ",
    r"\degree",
    "°",
    r"\%",
    "%",
    r"\$",
    "$",
    r"\(",
    r"\)",
    r"\[",
    r"\]",
    r"\displaystyle",
    r"\,",
    r"\!",
    r"\;",
    r"\:",
    "\\ ",
    "~",
)
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+")
_INTEGER = re.compile(r"[+-]?\d+(?:\.0*)?")


def normalize_integer(s: str | None) -> int | None:
    r"""The integer ``s`` denotes, or None when it is not an integer literal after cosmetic clean-up.

    Removed: ``$``, ``\( \) \[ \]``, ``\text{…}`` / ``\textbf{…}`` / ``\mathrm{…}`` / ``\mathbf{…}`` wrappers
    (content kept), spaces and ``\, \! \; \: ~``, ``{,}`` and ``,`` as thousands separators (``1{,}000``,
    ``1,000``; ``1,2`` is not an integer), leading zeros (``070``), trailing ``.``, ``.0`` decimals, degree
    signs (``^\circ``, ``^{\circ}``, ``°``), ``\%``, ``\$``, and braces around the whole (``{70}``).
    """
    if s is None:
        return None
    t = s.replace("\u2212", "-")  # unicode minus
    prev = None
    while prev != t:
        prev = t
        t = _UNWRAP.sub(r"\1", t)
    for token in _DROP:
        t = t.replace(token, "")
    t = t.replace("{,}", ",")
    t = "".join(t.split())
    while t.startswith("{") and t.endswith("}"):
        t = t[1:-1]
    t = t.rstrip(".")
    if _THOUSANDS.fullmatch(t):
        t = t.replace(",", "")
    if not _INTEGER.fullmatch(t):
        return None
    return int(t.split(".")[0])


def canonical_answer(s: str | None) -> str | None:
    """A key that makes equivalent integer answers equal (``"070"``, ``"\\text{70}"`` -> ``"70"``), for
    majority votes and answer histograms. Non-integer answers keep their text with whitespace removed."""
    if s is None:
        return None
    n = normalize_integer(s)
    if n is not None:
        return str(n)
    return "".join(s.split()) or None


# ---------------------------------------------------------------------------- math-verify, out of process

# The worker is a plain ``python -c`` child process that needs only math-verify (not evalkit, and not the
# parent's ``__main__``, which multiprocessing's spawn would re-import). Protocol: one JSON object per line
# each way; the worker writes "ready" once math-verify is imported. math-verify's signal-based timeouts are
# disabled (``None``; they only work on a main thread); the parent enforces the timeout by killing the child.
_WORKER_SOURCE = r"""
import json, logging, sys, time
out, sys.stdout = sys.stdout, sys.stderr  # stray prints must not corrupt the protocol
logging.getLogger("math_verify").setLevel(logging.ERROR)
from math_verify import parse, verify

def latex(s):
    return s if "$" in s else "$" + s + "$"

out.write("ready\n")
out.flush()
for line in sys.stdin:
    req = json.loads(line)
    try:
        if req.get("op") == "sleep":  # for tests of the timeout path
            time.sleep(req["seconds"])
            resp = {"verdict": None}
        else:
            pred = parse(latex(req["extracted"]), parsing_timeout=None)
            gold = parse(latex(req["gold"]), parsing_timeout=None)
            ok = None if not pred or not gold else bool(verify(gold, pred, timeout_seconds=None))
            resp = {"verdict": ok}
    except Exception as e:
        resp = {"error": repr(e)[:500]}
    out.write(json.dumps(resp) + "\n")
    out.flush()
"""

_EOF = object()


class _VerifierProcess:
    """One math-verify child process running requests one at a time under a hard timeout.

    Started on first use; on a timeout (or if it died) the process is killed and the next request starts a
    fresh one. Requests are serialised with a lock, so each timeout measures only its own request, and the
    class is safe to call from several threads.
    """

    def __init__(self, startup_timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[object] = queue.Queue()
        self._startup_timeout_s = startup_timeout_s
        self.starts = 0

    @staticmethod
    def _pump(stream: IO[str], lines: queue.Queue[object]) -> None:
        try:
            for line in stream:
                lines.put(line)
        except (OSError, ValueError):
            pass
        finally:
            lines.put(_EOF)
            with contextlib.suppress(OSError):
                stream.close()

    def _get(self, timeout: float) -> str:
        try:
            item = self._lines.get(timeout=timeout)
        except queue.Empty:
            self._kill()
            raise TimeoutError(f"math-verify worker gave no answer within {timeout}s; killed") from None
        if item is _EOF:
            self._kill()
            raise RuntimeError("math-verify worker exited")
        return str(item)

    def _ensure(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            self._kill()
            proc = subprocess.Popen(
                [sys.executable, "-c", _WORKER_SOURCE],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                encoding="utf-8",
                bufsize=1,
            )
            self._proc = proc
            self._lines = queue.Queue()
            assert proc.stdout is not None
            threading.Thread(
                target=self._pump, args=(proc.stdout, self._lines), daemon=True, name="math-verify-reader"
            ).start()
            self.starts += 1
            if self._get(self._startup_timeout_s).strip() != "ready":
                self._kill()
                raise RuntimeError("math-verify worker did not start")
        return self._proc

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()  # stdout is closed by its reader thread at EOF

    def request(self, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send one request; its answer, or TimeoutError after ``timeout`` seconds (the worker is killed)."""
        with self._lock:
            proc = self._ensure()
            assert proc.stdin is not None
            try:
                proc.stdin.write(json.dumps(payload) + "\n")
                proc.stdin.flush()
            except OSError:
                self._kill()
                raise RuntimeError("math-verify worker exited") from None
            answer: dict[str, Any] = json.loads(self._get(timeout))
            return answer

    def close(self) -> None:
        with self._lock:
            self._kill()


_WORKER = _VerifierProcess()
atexit.register(_WORKER.close)


def shutdown_verifier() -> None:
    """Stop the math-verify worker process (it restarts on the next use); also done at exit."""
    _WORKER.close()


@functools.lru_cache(maxsize=4096)
def _math_verify_cached(extracted: str, gold: str, timeout_s: float) -> bool | None:
    # Raises on timeout or failure, and lru_cache does not cache raised calls: only verdicts are remembered.
    answer = _WORKER.request({"extracted": extracted, "gold": gold}, timeout=timeout_s)
    if "error" in answer:
        raise RuntimeError(f"math-verify raised {answer['error']}")
    verdict = answer.get("verdict")
    return None if verdict is None else bool(verdict)


# ------------------------------------------------------------------------------------------------ verifying

VerifyHow = Literal["integer", "math_verify", "unparsed", "empty", "timeout", "error"]


def verify(extracted: str, gold: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[bool | None, VerifyHow]:
    r"""Is ``extracted`` the same answer as ``gold``? ``(correct, how)``.

    - ``"integer"``: both normalise to integers (:func:`normalize_integer`) and are compared as such;
    - ``"math_verify"``: otherwise math-verify decides (``\dfrac{140}{2}`` = 70), in the worker process;
    - ``"unparsed"``: math-verify could not parse one side: False;
    - ``"empty"``: nothing to compare: False;
    - ``"timeout"``: math-verify ran past ``timeout_s`` (the worker is killed): None;
    - ``"error"``: the worker failed otherwise: None.
    """
    if not extracted or not extracted.strip():
        return False, "empty"
    ex_int = normalize_integer(extracted)
    gold_int = normalize_integer(gold)
    if ex_int is not None and gold_int is not None:
        return ex_int == gold_int, "integer"
    try:
        verdict = _math_verify_cached(extracted.strip(), gold.strip(), float(timeout_s))
    except TimeoutError:
        log.warning("math-verify timed out after %ss on %.200r", timeout_s, extracted)
        return None, "timeout"
    except Exception as e:  # the worker died or math-verify raised: a verdict we do not have
        log.warning("math-verify failed on %.200r: %s", extracted, e)
        return None, "error"
    if verdict is None:
        return False, "unparsed"
    return verdict, "math_verify"


# -------------------------------------------------------------------------------------------------- scoring


class AnswerScore(NamedTuple):
    """Outcome of :func:`score_answer`.

    status: ``"ok"``; ``"no_answer"`` (no box in the answer text); ``"truncated"`` when ``finish_reason`` is
    ``"length"`` (whatever was extracted is still recorded and verified). extracted: the box content or None.
    correct: the verdict (False when nothing was extracted, None on a verifier timeout/error).
    how: ``"<extraction method>/<verify how>"`` (e.g. ``"boxed/integer"``), or ``"none"``.
    """

    status: Literal["ok", "no_answer", "truncated"]
    extracted: str | None
    correct: bool | None
    how: str


def score_answer(
    answer_text: str | None,
    gold: str,
    *,
    finish_reason: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> AnswerScore:
    """Extract and verify the final answer in ``answer_text`` (the answer only, never the reasoning)."""
    truncated = finish_reason == "length"
    ext = extract_boxed(answer_text)
    if ext.value is None:
        return AnswerScore("truncated" if truncated else "no_answer", None, False, "none")
    correct, how = verify(ext.value, gold, timeout_s)
    return AnswerScore("truncated" if truncated else "ok", ext.value, correct, f"{ext.method}/{how}")
