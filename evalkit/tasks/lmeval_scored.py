"""lm-eval's ``loglikelihood`` (``multiple_choice``) and ``loglikelihood_rolling`` requests, sent exactly as
lm-eval's ``local-completions`` model sends them and scored by its ``parse_logprobs``.

Token boundaries are lm-eval's own: a :class:`Splitter` is lm-eval's ``LocalCompletionsAPI`` whose token-level
call (``_loglikelihood_tokens``) is captured instead of sent, so ``TemplateLM.loglikelihood`` (trailing spaces
moved to the continuation, context and whole string encoded, the empty-context prefix token),
``loglikelihood_rolling`` (``get_rolling_token_windows`` with the prefix token) and
``batch_loglikelihood_requests`` (the left truncation to ``max_length - 1``) decide each request's token ids and
context length. Each becomes one completions request (``echo: true, logprobs: 1, max_tokens: 1, temperature: 0``,
the prompt as token ids) whose answer lm-eval's ``LocalCompletionsAPI.parse_logprobs`` reads.

Tokens come from a local Hugging Face tokenizer (``--tokenizer PATH``) or, without one, from the server's
``/tokenize`` (vLLM's; its ``/tokenizer_info`` gives the BOS/EOS token when a prefix token is needed).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson

from evalkit.contracts import GenParams, Request, Response, Score
from evalkit.errors import TaskError

SCORED_TYPES = ("loglikelihood", "multiple_choice", "loglikelihood_rolling")
LM_EVAL_MAX_LENGTH = 2048  # lm-eval's TemplateAPI default max_length
PREFILL_NOTE = (
    "scored requests (echo, logprobs 1, max_tokens 1), answered whole: their speed is prefill speed (prompt "
    "tokens/s = total - output tokens/s, requests/s, E2E latency); no TTFT, TPOT or ITL"
)
SCORED_GEN = GenParams(max_tokens=1, temperature=0.0, seed=1234, logprobs=1, echo=True)


class ServerTokenizer:
    """lm-eval's ``remote`` tokenizer interface over a vLLM server's ``/tokenize`` (``add_special_tokens: false``,
    as lm-eval's RemoteTokenizer sends), each text asked once."""

    WORKERS = 16  # texts asked at once by prefetch (the session keeps as many connections)
    NEED = (
        "lm-eval's loglikelihood requests need the server's tokenizer (vLLM's /tokenize), or a local one with "
        "--tokenizer PATH"
    )

    def __init__(self, root: str, headers: dict[str, str], need: str = NEED) -> None:
        """``need``: what the failure line says the tokenizer is needed for, and the fix."""
        import requests
        from requests.adapters import HTTPAdapter

        self.root = root.rstrip("/")
        self.session = requests.Session()
        for scheme in ("http://", "https://"):
            self.session.mount(scheme, HTTPAdapter(pool_connections=1, pool_maxsize=self.WORKERS))
        self.session.headers.update({"Content-Type": "application/json", **headers})
        self.cache: dict[str, list[int]] = {}
        self.need = need
        self.max_model_len: int | None = None  # as the last /tokenize answer gave it
        self._info: dict[str, Any] | None = None

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        import requests

        try:
            r = self.session.post(self.root + path, data=orjson.dumps(body), timeout=60, allow_redirects=False)
        except requests.RequestException as e:
            raise TaskError(f"{self.root}{path}: {e}; is the server up? ({self.need})") from None
        if r.status_code != 200:
            raise TaskError(f"{self.root}{path} answered HTTP {r.status_code}: {self.need}")
        return r.json()

    def encode(self, text: str) -> list[int]:
        ids = self.cache.get(text)
        if ids is None:
            answer = self._post("/tokenize", {"prompt": text, "add_special_tokens": False})
            tokens = answer.get("tokens") if isinstance(answer, dict) else None
            if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
                raise TaskError(f"{self.root}/tokenize: the answer has no list of token ids; {self.need}")
            if type(answer.get("max_model_len")) is int:
                self.max_model_len = answer["max_model_len"]
            ids = self.cache[text] = tokens
        return ids

    def prefetch(self, texts: Sequence[str]) -> None:
        """Ask the server for every text not yet known, ``WORKERS`` at a time."""
        todo = list(dict.fromkeys(t for t in texts if t not in self.cache))
        with ThreadPoolExecutor(max_workers=self.WORKERS) as pool:
            list(pool.map(self.encode, todo))

    def _special(self, key: str) -> int | None:
        if self._info is None:
            r = self.session.get(self.root + "/tokenizer_info", timeout=60, allow_redirects=False)
            if r.status_code != 200:
                raise TaskError(
                    f"{self.root}/tokenizer_info answered HTTP {r.status_code}: this task needs the model's BOS/EOS "
                    "token (lm-eval's prefix token); start vLLM with --enable-tokenizer-info-endpoint or pass "
                    "--tokenizer PATH"
                )
            info = r.json()
            self._info = dict(info) if isinstance(info, dict) else {}
        token = self._info.get(key)
        return None if token is None else self.encode(str(token))[0]

    @property
    def bos_token_id(self) -> int | None:
        return self._special("bos_token")

    @property
    def eos_token_id(self) -> int | None:
        return self._special("eos_token")


def splitter(tokenizer: str | None, root: str, headers: dict[str, str], max_length: int | None) -> Any:
    """lm-eval's ``local-completions`` model set up as the reference run sets it (its ``max_length``), with a
    local tokenizer or the server's; nothing is sent through it."""
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    class Splitter(LocalCompletionsAPI):
        captured: list[Any]

        def _loglikelihood_tokens(self, requests: Any, **kwargs: Any) -> list[tuple[float, bool]]:
            self.captured = list(requests)
            return [(0.0, False)] * len(self.captured)

    length = max_length or LM_EVAL_MAX_LENGTH
    if tokenizer:
        try:
            return Splitter(base_url=root, tokenizer_backend="huggingface", tokenizer=tokenizer, max_length=length)
        except OSError as e:
            raise TaskError(f"--tokenizer {tokenizer}: not a tokenizer folder ({str(e).splitlines()[0]})") from None
    lm = Splitter(base_url=root, tokenizer_backend=None, max_length=length)
    lm.tokenizer_backend, lm.tokenized_requests = "remote", True
    lm.tokenizer = ServerTokenizer(root, headers)
    return lm


def token_requests(lm: Any, entry: dict[str, Any]) -> list[tuple[list[int], int]]:
    """One lm-eval request (a built entry) as the (token ids, context length) pairs local-completions sends."""
    from lm_eval.api.instance import Instance

    if entry["type"] == "loglikelihood_rolling":
        args: tuple[str, ...] = (entry["context"],)
        inst = Instance(request_type="loglikelihood_rolling", doc={}, arguments=args, idx=0)
        lm.loglikelihood_rolling([inst], disable_tqdm=True)
    else:
        args = (entry["context"], entry["continuation"])
        inst = Instance(request_type="loglikelihood", doc={}, arguments=args, idx=0)
        lm.loglikelihood([inst], disable_tqdm=True)
    inputs, ctxlens, _ = lm.batch_loglikelihood_requests([lm.captured])
    return [(list(ids), int(n)) for ids, n in zip(inputs, ctxlens, strict=True)]


def prefetch_texts(lm: Any, entries: Sequence[dict[str, Any]]) -> None:
    """The server tokenizer asked for every text lm-eval will encode, concurrently (a local tokenizer: nothing)."""
    tok = lm.tokenizer
    if not isinstance(tok, ServerTokenizer):
        return
    texts: list[str] = []
    for e in entries:
        if e["type"] == "loglikelihood_rolling":
            texts.append(e["context"])
            continue
        context, continuation = e["context"], e["continuation"]
        n = len(context) - len(context.rstrip())
        if n:
            context, continuation = context[:-n], context[-n:] + continuation
        texts += [context + continuation, context] if context else [continuation]
    tok.prefetch(texts)


def scored_requests(task: str, lm: Any, entries: Sequence[dict[str, Any]]) -> list[Request]:
    """The requests of ``entries`` (every lm-eval request of the chosen documents, in order): per document,
    ``sample_index`` counts its token requests; ``target`` records lm-eval's request index (``idx``), the window
    and the context length that parsing needs."""
    prefetch_texts(lm, entries)
    out: list[Request] = []
    per_doc: dict[int, int] = {}
    for e in entries:
        text = e["context"] + e.get("continuation", "")
        for window, (ids, ctxlen) in enumerate(token_requests(lm, e)):
            index = per_doc.get(e["doc_id"], 0)
            per_doc[e["doc_id"]] = index + 1
            target = {"idx": e["idx"], "window": window, "ctxlen": ctxlen}
            out.append(
                Request(
                    task=task,
                    doc_id=e["doc_id"],
                    sample_index=index,
                    prompt=text,
                    gen=SCORED_GEN,
                    target=orjson.dumps(target).decode(),
                    prompt_ids=tuple(ids),
                )
            )
    return out


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _malformed(logprobs: dict[str, Any], ctxlen: int) -> str | None:
    """What keeps lm-eval's ``parse_logprobs`` from reading the continuation's positions (``[ctxlen:-1]``) of an
    echoed answer: a token logprob that is not a finite number, ``top_logprobs`` missing, shorter than the
    token logprobs, or a position's not a mapping of finite numbers; None when it reads."""
    tokens = logprobs["token_logprobs"][ctxlen:-1]
    bad = [v for v in tokens if not _number(v)]
    if bad:
        return f"token_logprobs holds {repr(bad[0])[:40]}, not a finite number"
    tops = logprobs.get("top_logprobs")
    if not isinstance(tops, list):
        return f"top_logprobs is {type(tops).__name__}, not a list"
    tops = tops[ctxlen:-1]
    if len(tops) != len(tokens):
        return f"{len(tops)} top_logprobs for {len(tokens)} token_logprobs"
    if not all(isinstance(t, dict) and t and all(_number(v) for v in t.values()) for t in tops):
        return "a position's top_logprobs is not a mapping of tokens to numbers"
    return None


def score_answer(request: Request, response: Response) -> Score:
    """The (loglikelihood, is_greedy) of one answer by lm-eval's ``LocalCompletionsAPI.parse_logprobs``, kept in
    ``extracted`` (the log-likelihood as ``repr``, so it reads back to the same float)."""
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    target = orjson.loads(request.target or "{}")
    ctxlen = int(target["ctxlen"])
    choice_logprobs = (response.logprobs or {}).get("logprobs")
    if not isinstance(choice_logprobs, dict) or not isinstance(choice_logprobs.get("token_logprobs"), list):
        note = "the answer has no echoed prompt logprobs (the server must support echo with logprobs)"
        return Score(status="no_answer", extracted={}, correct={}, extraction=note)
    malformed = _malformed(choice_logprobs, ctxlen)
    if malformed:
        note = f"the answer's echoed logprobs are malformed: {malformed}; not scored"
        return Score(status="no_answer", extracted={}, correct={}, extraction=note)
    out = {"choices": [{"index": 0, "logprobs": choice_logprobs}]}
    ll, greedy = LocalCompletionsAPI.parse_logprobs(outputs=out, ctxlens=[ctxlen])[0]
    extracted: dict[str, str | None] = {
        "loglikelihood": repr(float(ll)),
        "is_greedy": "1" if greedy else "0",
        "idx": str(target["idx"]),
    }
    return Score(status="ok", extracted=extracted, correct={}, extraction="lm-eval parse_logprobs")


def doc_results(kind: str, extracted: Sequence[dict[str, str | None]]) -> list[Any] | None:
    """One document's lm-eval results (each request's, by its ``idx``) from its scored answers: (ll, is_greedy)
    per loglikelihood request, the windows' summed ll per rolling one; None when one is missing."""
    by_idx: dict[int, list[tuple[float, bool]]] = {}
    for x in extracted:
        if x.get("loglikelihood") is None or x.get("idx") is None:
            return None
        by_idx.setdefault(int(str(x["idx"])), []).append((float(str(x["loglikelihood"])), x.get("is_greedy") == "1"))
    if sorted(by_idx) != list(range(len(by_idx))):
        return None
    if kind == "loglikelihood_rolling":
        return [sum(ll for ll, _ in by_idx[i]) for i in range(len(by_idx))]
    return [by_idx[i][0] for i in range(len(by_idx))]
