"""Reports opened in headless Chromium from file://: no console errors, no network, no injected script,
charts drawn, filter works. Screenshots go to ``artifacts/report-*.png``.

Talks to Chromium over the DevTools protocol (``--remote-debugging-port=0``, port read from
``DevToolsActivePort``) with the ``websockets`` client. Skipped when no Chromium binary is found.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from evalkit.reporting import render_compare, render_run

try:
    from tests.report_fixtures import build_aime_run, build_gsm8k_run
except ImportError:  # tests/ is not a package: pytest put tests/ itself on sys.path
    from report_fixtures import build_aime_run, build_gsm8k_run  # type: ignore[no-redef]

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


def find_chromium() -> str | None:
    env = os.environ.get("EVALKIT_CHROMIUM")
    if env:
        return env if shutil.which(env) or Path(env).is_file() else None
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


CHROMIUM = find_chromium()
if CHROMIUM is None:
    pytest.skip(
        "no Chromium found (install Debian's `chromium` or set EVALKIT_CHROMIUM); browser tests skipped",
        allow_module_level=True,
    )
websockets_client = pytest.importorskip("websockets.asyncio.client", reason="the websockets package is needed")


@dataclass
class PageLog:
    errors: list[str] = field(default_factory=list)  # console errors/warnings, exceptions, log errors
    requests: list[str] = field(default_factory=list)  # every URL the page asked for


class CDP:
    """A minimal Chrome DevTools Protocol client over one browser websocket (flattened sessions)."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.events: list[dict[str, Any]] = []
        self.waiters: list[tuple[str, asyncio.Future[dict[str, Any]]]] = []
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for raw in self.ws:
            msg = json.loads(raw)
            if "id" in msg:
                fut = self.pending.pop(msg["id"], None)
                if fut is not None and not fut.done():
                    fut.set_result(msg)
                continue
            self.events.append(msg)
            for name, fut in list(self.waiters):
                if msg.get("method") == name and not fut.done():
                    fut.set_result(msg)
                    self.waiters.remove((name, fut))

    async def send(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        session: str | None = None,
        timeout: float = 30.0,
    ) -> dict[str, Any]:
        mid = next(self.ids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[mid] = fut
        msg: dict[str, Any] = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        await self.ws.send(json.dumps(msg))
        reply = await asyncio.wait_for(fut, timeout)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def wait_for(self, method: str) -> asyncio.Future[dict[str, Any]]:
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiters.append((method, fut))
        return fut


@contextlib.asynccontextmanager
async def chromium() -> AsyncIterator[CDP]:
    assert CHROMIUM is not None
    with tempfile.TemporaryDirectory(prefix="evalkit-chromium-") as profile:
        log = open(Path(profile) / "stderr.log", "wb")  # noqa: SIM115 (closed below)
        proc = subprocess.Popen(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-default-apps",
                "--disable-extensions",
                "--no-first-run",
                "--no-default-browser-check",
                "--hide-scrollbars",
                f"--user-data-dir={profile}",
                "--remote-debugging-port=0",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,  # its renderer/utility children are in this group, stopped with it below
        )
        try:
            port_file = Path(profile) / "DevToolsActivePort"
            deadline = time.monotonic() + 60
            while True:
                if port_file.is_file():
                    lines = port_file.read_text().split("\n")
                    if len(lines) >= 2 and lines[1].strip():
                        break
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        "Chromium did not start: " + (Path(profile) / "stderr.log").read_text(errors="replace")[-2000:]
                    )
                await asyncio.sleep(0.05)
            url = f"ws://127.0.0.1:{lines[0].strip()}{lines[1].strip()}"
            async with websockets_client.connect(url, max_size=None, open_timeout=30) as ws:
                cdp = CDP(ws)
                try:
                    yield cdp
                finally:
                    cdp.reader.cancel()
        finally:
            _stop_group(proc)
            log.close()


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop Chromium and every child it started, and wait until none is left running: a child still writing into
    the profile would make the profile's removal fail (``Directory not empty: 'Default'``)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while _running_in_group(proc.pid):
        if time.monotonic() > deadline:
            raise RuntimeError(f"Chromium's children (process group {proc.pid}) did not stop")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL if time.monotonic() > deadline - 5 else signal.SIGTERM)
        time.sleep(0.05)


def _running_in_group(pgid: int) -> bool:
    """Whether a process of group ``pgid`` is alive (not a zombie waiting to be reaped), read from /proc."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended while being read
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


async def open_page(cdp: CDP, path: Path, width: int = 1400, height: int = 1800) -> tuple[str, PageLog]:
    target = (await cdp.send("Target.createTarget", {"url": "about:blank"}))["targetId"]
    session = (await cdp.send("Target.attachToTarget", {"targetId": target, "flatten": True}))["sessionId"]
    for domain in ("Runtime", "Log", "Network", "Page"):
        await cdp.send(f"{domain}.enable", session=session)
    await cdp.send(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600},
        session=session,
    )
    start = len(cdp.events)
    loaded = cdp.wait_for("Page.loadEventFired")
    url = path.resolve().as_uri()
    await cdp.send("Page.navigate", {"url": url}, session=session)
    await asyncio.wait_for(loaded, 60)
    await asyncio.sleep(0.5)
    page_log = PageLog()
    page_log_events = cdp.events[start:]
    collect(page_log, page_log_events, session)
    return session, page_log


def collect(page_log: PageLog, events: list[dict[str, Any]], session: str) -> None:
    for ev in events:
        if ev.get("sessionId") != session:
            continue
        method, params = ev.get("method"), ev.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert", "warning"):
            args = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            page_log.errors.append(f"console.{params.get('type')}: {args}")
        elif method == "Runtime.exceptionThrown":
            page_log.errors.append(f"exception: {params.get('exceptionDetails', {})}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") in ("error", "warning"):
            entry = params["entry"]
            page_log.errors.append(f"log {entry.get('source')}: {entry.get('text')} {entry.get('url', '')}")
        elif method == "Network.requestWillBeSent":
            page_log.requests.append(params.get("request", {}).get("url", ""))


async def evaluate(cdp: CDP, session: str, expr: str) -> Any:
    res = await cdp.send(
        "Runtime.evaluate", {"expression": expr, "returnByValue": True, "awaitPromise": True}, session=session
    )
    if "exceptionDetails" in res:
        raise AssertionError(f"evaluate({expr!r}) threw: {res['exceptionDetails']}")
    return res["result"].get("value")


async def screenshot(cdp: CDP, session: str, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    data = (await cdp.send("Page.captureScreenshot", {"format": "png"}, session=session))["data"]
    out = ARTIFACTS / f"report-{name}.png"
    out.write_bytes(base64.b64decode(data))
    return out


def assert_clean(page_log: PageLog, report: Path) -> None:
    assert page_log.errors == [], page_log.errors
    own = report.resolve().as_uri()
    foreign = [u for u in page_log.requests if u != own and not u.startswith("data:")]
    assert foreign == [], f"the report made requests: {foreign}"
    assert own in page_log.requests


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("browser-runs")
    a = build_gsm8k_run(base / "gsm8k-baseline", hostile=True)
    b = build_gsm8k_run(
        base / "gsm8k-fp8",
        seed=1,
        accuracy=0.75,
        speed=1.4,
        server_argv=[
            "vllm",
            "serve",
            "Qwen/Qwen3-8B",
            "--max-model-len",
            "8192",
            "--quantization",
            "fp8",
            "--max-num-seqs",
            "256",
        ],
    )
    c = build_gsm8k_run(
        base / "gsm8k-mns512",
        seed=2,
        accuracy=0.70,
        speed=1.2,
        client_bound=True,
        server_argv=["vllm", "serve", "Qwen/Qwen3-8B", "--max-model-len", "8192", "--max-num-seqs", "512"],
    )
    aime = build_aime_run(base / "aime-a", hostile=True)
    aime_b = build_aime_run(base / "aime-b", seed=3, speed=1.2)
    return {
        "run": render_run(a),
        "aime": render_run(aime),
        "compare": render_compare([a, b, c], base / "compare.html"),
        "compare-aime": render_compare([aime, aime_b], base / "compare-aime.html"),
    }


CHECKS = """(() => ({
  pwned: window.__pwned === undefined,
  canvases: document.querySelectorAll('canvas').length,
  charts: window.Chart ? Object.keys(window.Chart.instances).length : -1,
  drawn: Array.from(document.querySelectorAll('canvas')).filter(c => c.width > 0 && c.height > 0).length,
  imgs: document.querySelectorAll('img').length,
  injectedScripts: Array.from(document.scripts).filter(s => s.textContent.includes('__pwned')).length,
  csp: !!document.querySelector('meta[http-equiv="Content-Security-Policy"]'),
}))()"""


READY = "window.evalkitReport.ready.then(() => true)"


def test_run_report_in_chromium(reports: dict[str, Path]) -> None:
    async def go() -> None:
        async with chromium() as cdp:
            session, page_log = await open_page(cdp, reports["run"])
            assert await evaluate(cdp, session, READY)
            checks = await evaluate(cdp, session, CHECKS)
            assert checks["pwned"], "injected script ran"
            assert checks["injectedScripts"] == 0 and checks["imgs"] == 0
            assert checks["csp"]
            assert checks["canvases"] >= 5 and checks["charts"] == checks["canvases"] == checks["drawn"], checks
            await screenshot(cdp, session, "run-top")
            # first paint: 1,319 samples, a page of rows in the DOM, not all of them
            first = await evaluate(
                cdp,
                session,
                """(() => { const it = document.createNodeIterator(document, NodeFilter.SHOW_ALL); let nodes = 0;
                  while (it.nextNode()) { nodes += 1; }
                  return {rows: document.querySelectorAll('#rows details.s').length, nodes: nodes,
                          count: document.getElementById('f-count').textContent}; })()""",
            )
            assert first["rows"] == 100 and first["nodes"] < 5000, first
            assert first["count"].startswith("1,319 of 1,319 samples match"), first
            # client-side filter: api_error rows only
            shown = await evaluate(
                cdp,
                session,
                """(() => {
                const s = document.getElementById('f-status'); s.value = 'api_error';
                s.dispatchEvent(new Event('change'));
                return document.querySelectorAll('#rows details.s').length; })()""",
            )
            assert shown == 5
            verdict = await evaluate(
                cdp,
                session,
                """(() => {
                document.getElementById('f-status').value = '';
                const v = document.getElementById('f-verdict'); v.value = 'correct';
                v.dispatchEvent(new Event('change'));
                document.getElementById('f-more').click();
                const rows = Array.from(document.querySelectorAll('#rows details.s'));
                return [parseInt(document.getElementById('f-count').textContent.replace(/,/g, '')), rows.length,
                        rows.every(r => r.querySelector('.vd').textContent === 'correct')]; })()""",
            )
            assert verdict[0] > 500 and verdict[1] == 200 and verdict[2], verdict
            # the hostile sample: its question and answer first, the text visible as text
            await evaluate(
                cdp,
                session,
                """(() => {
                document.getElementById('f-verdict').value = '';
                const q = document.getElementById('f-q'); q.value = 'onerror';
                window.evalkitReport.applyFilter();
                const row = document.querySelector('#rows details.s');
                row.open = true; row.scrollIntoView(); window.scrollBy(0, -60); return true; })()""",
            )
            await asyncio.sleep(0.2)
            text = await evaluate(cdp, session, "document.body.innerText")
            assert "</script><script>window.__pwned=1</script>" in text
            assert "<img src=x onerror=alert(1)>" in text
            order = await evaluate(
                cdp,
                session,
                """Array.from(document.querySelector('#rows details.s[open] .body').children)
                   .map(e => e.tagName === 'DETAILS' ? 'details:' + e.querySelector('summary').textContent
                                                     : (e.querySelector('.tl') || e).textContent.slice(0, 24))""",
            )
            assert order[1].startswith("Question under test") and order[2].startswith("Response"), order
            assert re.match(r"details:\d+ few-shot examples", order[-1]), order  # collapsed, after the answer
            await screenshot(cdp, session, "run-sample")
            # the 200,000-character line: cut, wrapped, no horizontal overflow of the page
            overflow = await evaluate(
                cdp,
                session,
                """(() => {
                document.getElementById('f-q').value = '';
                window.evalkitReport.applyFilter();
                const row = Array.from(document.querySelectorAll('#rows details.s'))[4];
                row.open = true; row.scrollIntoView(); window.scrollBy(0, -60);
                return document.documentElement.scrollWidth - document.documentElement.clientWidth; })()""",
            )
            assert overflow <= 0
            await asyncio.sleep(0.2)
            await screenshot(cdp, session, "run-long")
            await evaluate(cdp, session, "document.getElementById('server').scrollIntoView(), true")
            await asyncio.sleep(0.2)
            await screenshot(cdp, session, "run-server")
            assert_clean(page_log, reports["run"])
            everything = PageLog()  # also what happened while filtering and scrolling
            collect(everything, cdp.events, session)
            assert_clean(everything, reports["run"])

            session, page_log = await open_page(cdp, reports["aime"])
            assert await evaluate(cdp, session, READY)
            checks = await evaluate(cdp, session, CHECKS)
            assert checks["pwned"] and checks["charts"] >= 4, checks
            await screenshot(cdp, session, "aime-top")
            await evaluate(cdp, session, "document.getElementById('details').scrollIntoView(), true")
            await asyncio.sleep(0.2)
            await screenshot(cdp, session, "aime-details")
            assert_clean(page_log, reports["aime"])

    asyncio.run(go())


ROWS = "'#rows > details > summary'"
PHONE_CHECK = """(() => {
  const vw = document.documentElement.clientWidth;
  const cells = Array.from(document.querySelectorAll(SELECTOR)).slice(0, 30).flatMap(s => Array.from(s.children));
  const unreachable = cells.filter(c => {
    const r = c.getBoundingClientRect();
    return r.width <= 0 || r.left < -1 || r.right > vw + 1 || c.scrollWidth > c.clientWidth + 1;
  }).map(c => (c.getAttribute('data-l') || '') + '=' + c.textContent);
  return {page: document.documentElement.scrollWidth - vw, cells: cells.length, unreachable: unreachable};
})()"""


def test_reports_on_a_phone(reports: dict[str, Path]) -> None:
    """390 px wide: the page never scrolls sideways and every column of a sample (and of a flip) is on screen,
    labelled, with its value whole."""

    async def go() -> None:
        async with chromium() as cdp:
            session, page_log = await open_page(cdp, reports["run"], width=390, height=844)
            assert await evaluate(cdp, session, READY)
            await screenshot(cdp, session, "phone-top")
            check = await evaluate(cdp, session, PHONE_CHECK.replace("SELECTOR", ROWS))
            assert check["page"] <= 0, check
            assert check["cells"] == 30 * 11 and check["unreachable"] == [], check
            await evaluate(
                cdp,
                session,
                """(() => { const row = document.querySelectorAll('#rows details.s')[3]; row.open = true;
                row.scrollIntoView(); return true; })()""",
            )
            await asyncio.sleep(0.2)
            assert (await evaluate(cdp, session, PHONE_CHECK.replace("SELECTOR", ROWS)))["page"] <= 0
            await screenshot(cdp, session, "phone-sample")
            for section in ("speed", "server"):
                await evaluate(cdp, session, f"document.getElementById('{section}').scrollIntoView(), true")
                await asyncio.sleep(0.2)
                await screenshot(cdp, session, f"phone-{section}")
            assert_clean(page_log, reports["run"])

            session, page_log = await open_page(cdp, reports["compare"], width=390, height=844)
            await evaluate(
                cdp,
                session,
                """(() => { const d = document.querySelector('#flips details.s'); d.open = true;
                document.getElementById('flips').scrollIntoView(); return true; })()""",
            )
            await asyncio.sleep(0.2)
            check = await evaluate(cdp, session, PHONE_CHECK.replace("SELECTOR", "'#flips .rows > details > summary'"))
            assert check["page"] <= 0, check
            assert check["cells"] > 0 and check["unreachable"] == [], check
            await screenshot(cdp, session, "phone-compare-flips")
            assert_clean(page_log, reports["compare"])

    asyncio.run(go())


def test_compare_report_in_chromium(reports: dict[str, Path]) -> None:
    async def go() -> None:
        async with chromium() as cdp:
            session, page_log = await open_page(cdp, reports["compare"])
            checks = await evaluate(cdp, session, CHECKS)
            assert checks["pwned"], "injected script ran"
            # the scatter and throughput over time
            assert checks["canvases"] == 2 and checks["charts"] == 2 and checks["drawn"] == 2, checks
            await screenshot(cdp, session, "compare-top")
            await evaluate(
                cdp,
                session,
                """(() => {
                const d = document.querySelector('#flips details.s'); d.open = true;
                document.getElementById('flips').scrollIntoView(); return true; })()""",
            )
            await asyncio.sleep(0.2)
            await screenshot(cdp, session, "compare-flips")
            assert_clean(page_log, reports["compare"])
            everything = PageLog()
            collect(everything, cdp.events, session)
            assert_clean(everything, reports["compare"])

            session, page_log = await open_page(cdp, reports["compare-aime"])
            checks = await evaluate(cdp, session, CHECKS)
            assert checks["pwned"] and checks["charts"] == 2, checks
            await evaluate(cdp, session, "document.getElementById('flips').scrollIntoView(), true")
            await asyncio.sleep(0.2)
            await screenshot(cdp, session, "compare-aime-flips")
            assert_clean(page_log, reports["compare-aime"])

    asyncio.run(go())
