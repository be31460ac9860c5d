"""evalkit's LM class for lm-eval: ``generate_until`` goes through evalkit's own async streaming client.

Registered with lm-eval as ``evalkit`` when this module is imported, so lm-eval's own evaluator can drive it::

    import lm_eval, evalkit.client.lm_eval_model
    lm = evalkit.client.lm_eval_model.EvalkitLM(base_url="http://127.0.0.1:8000/v1", num_concurrent=64)
    lm_eval.simple_evaluate(model=lm, tasks=["gsm8k"])

Each completed request is also handed to ``on_result(instance, response)`` (timings included) when given.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import lm_eval.models  # noqa: F401  # lm-eval fills its registry only while it is empty: before "evalkit" is in
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model

from evalkit.client.http_client import Client
from evalkit.client.model_discovery import list_models, resolve_model
from evalkit.client.scheduler import execute
from evalkit.config.endpoint import normalize_base_url
from evalkit.contracts import GenParams, Request, Response


@register_model("evalkit")
class EvalkitLM(LM):
    """Completions-endpoint LM whose generations stream through :class:`evalkit.client.http_client.Client`."""

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        num_concurrent: int | str = 1,
        max_gen_toks: int = 256,
        seed: int = 1234,
        api_key: str | None = None,
        on_result: Callable[[Any, Response], None] | None = None,
        **_: Any,
    ) -> None:
        super().__init__()
        self.base_url = normalize_base_url(base_url)
        self.api_key = api_key
        self.model = model or resolve_model(list_models(self.base_url, api_key), None, self.base_url).id
        self.concurrency: int | str = int(num_concurrent) if str(num_concurrent).isdigit() else num_concurrent
        self.max_gen_toks = int(max_gen_toks)
        self.seed = int(seed)
        self.on_result = on_result
        self.responses: list[Response] = []

    def _request(self, i: int, context: str, gen_kwargs: dict[str, Any]) -> Request:
        until = gen_kwargs.get("until") or []
        if isinstance(until, str):
            until = [until]
        gen = GenParams(
            max_tokens=int(gen_kwargs.get("max_gen_toks", self.max_gen_toks)),
            temperature=float(gen_kwargs.get("temperature", 0.0)),
            top_p=gen_kwargs.get("top_p"),
            seed=self.seed,
            stop=tuple(until),
        )
        return Request(task="lm-eval", doc_id=i, sample_index=0, prompt=context, gen=gen)

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        reqs = [self._request(i, inst.args[0], dict(inst.args[1])) for i, inst in enumerate(requests)]
        out: list[Response | None] = [None] * len(reqs)

        def done(req: Request, resp: Response) -> None:
            out[req.doc_id] = resp
            if self.on_result is not None:
                self.on_result(requests[req.doc_id], resp)

        async def go() -> None:
            async with Client(self.base_url, self.model, kind="completions", api_key=self.api_key) as client:
                await execute(reqs, client, done, concurrency=self.concurrency)

        asyncio.run(go())
        self.responses = [r for r in out if r is not None]
        failed = [r for r in out if r is None or r.error is not None]
        if failed:
            first = failed[0]
            raise RuntimeError(f"{len(failed)} requests failed; first: {first.error if first else 'no response'}")
        return [r.text or "" for r in out if r is not None]

    def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        raise NotImplementedError("evalkit evaluates generation tasks (generate_until) only")

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        raise NotImplementedError("evalkit evaluates generation tasks (generate_until) only")
