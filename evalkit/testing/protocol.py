"""Requests in, vLLM-shaped JSON out: validation of a generation request and its wire format
(as vLLM's ``vllm/entrypoints/openai/{completion,chat_completion}/protocol.py`` serialize them)."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import orjson

from evalkit.testing import hostile
from evalkit.testing.answers import TOKEN_RE, default_answer, last_user_text
from evalkit.testing.generation import ChoicePlan, plan_choice, plan_tool_choice
from evalkit.testing.scored import Perturbation, prompt_text, scored_fields
from evalkit.testing.state import ServerState
from evalkit.testing.tools import REFUSED, tool_answer


class ApiError(Exception):
    def __init__(self, status: int, message: str, type_: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type = status, message, type_


@dataclass
class Job:
    """A validated generation request."""

    chat: bool
    model: str
    prompts: list[str]  # completions prompts, or [last user message]
    prompt_tokens: list[list[str]]  # per prompt, as tokens
    n: int
    stream: bool
    include_usage: bool
    continuous_usage: bool
    plans: list[ChoicePlan]
    rid: str
    created: int
    scored: dict[str, Any] | None = None  # a request with prompt_logprobs: evalkit.testing.scored.scored_fields


# ------------------------------------------------------------------------------------------ validation


def parse_job(state: ServerState, body: dict[str, Any], chat: bool) -> Job:
    b = state.behaviour
    model = body.get("model") or b.models[0]
    if model not in b.models:
        raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError")
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise ApiError(400, "`messages` must be a non-empty list of message objects")
        prompts = [last_user_text(messages)]
        prompt_tokens = [TOKEN_RE.findall(prompt_text(body, chat) or "")]  # the rendered messages
    else:
        raw = body.get("prompt")
        if isinstance(raw, str):
            items: list[Any] = [raw]
        elif isinstance(raw, list) and raw and all(isinstance(x, int) for x in raw):
            items = [raw]  # one prompt given as token ids
        elif isinstance(raw, list) and raw:
            items = raw
        else:
            raise ApiError(400, "`prompt` must be a string, a list of strings or token ids")
        prompts, prompt_tokens = [], []
        for item in items:
            if isinstance(item, str):
                prompts.append(item)
                prompt_tokens.append(TOKEN_RE.findall(item))
            elif isinstance(item, list) and all(isinstance(x, int) for x in item):
                prompts.append(" ".join(map(str, item)))
                prompt_tokens.append([f" {x}" for x in item])
            else:
                raise ApiError(400, "`prompt` must be a string, a list of strings or token ids")
        if body.get("echo") and body.get("logprobs") is None:
            raise ApiError(400, "`echo` without `logprobs` is not supported by the evalkit test server")
    n = body.get("n", 1) or 1
    if not isinstance(n, int) or n < 1:
        raise ApiError(400, "`n` must be a positive integer")
    max_tokens = body.get("max_completion_tokens") if chat else None
    if max_tokens is None:
        max_tokens = body.get("max_tokens", None if chat else 16)
    longest = max(len(t) for t in prompt_tokens)
    if max_tokens is None:
        max_tokens = b.max_model_len - longest
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise ApiError(400, f"max_tokens must be at least 1, got {max_tokens}.")
    if longest + max_tokens > b.max_model_len:
        raise ApiError(
            400,
            f"This model's maximum context length is {b.max_model_len} tokens. However, you requested "
            f"{longest + max_tokens} tokens ({longest} in the messages, {max_tokens} in the completion). "
            "Please reduce the length of the messages or completion.",
        )
    min_tokens = body.get("min_tokens") or 0
    if not isinstance(min_tokens, int) or isinstance(min_tokens, bool) or not 0 <= min_tokens <= max_tokens:
        raise ApiError(400, f"min_tokens must be an integer from 0 to max_tokens ({max_tokens}), got {min_tokens}.")
    stop = body.get("stop") or []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise ApiError(400, "`stop` must be a string or a list of strings")
    temperature = body.get("temperature")
    temperature = 1.0 if temperature is None else float(temperature)
    seed = body.get("seed")
    stream = bool(body.get("stream", False))
    opts = body.get("stream_options") or {}
    ctk = body.get("chat_template_kwargs") or {}
    reasoning = b.reasoning if chat and ctk.get("enable_thinking", True) is not False else None
    tools = chat and bool(body.get("tools")) and body.get("tool_choice", "auto") != "none"
    if tools and not b.auto_tool_choice:
        raise ApiError(400, REFUSED)

    pert = Perturbation(scale=b.logit_scale, noise=b.logit_noise, noise_seed=b.logit_noise_seed)
    scored = None if stream else scored_fields(body, chat, pert, max_tokens)
    plans: list[ChoicePlan] = []
    for pi, prompt in enumerate(prompts):
        arrival = 0
        if temperature > 0 and seed is None:
            arrival = state.arrivals[prompt]
            state.arrivals[prompt] += 1
        for i in range(n):
            index = pi * n + i
            if tools:
                ans = tool_answer(prompt, body, b.tool_variant)
                plans.append(
                    plan_tool_choice(
                        index,
                        ans.text,
                        ans.calls,
                        reasoning=ans.reasoning or reasoning,
                        max_tokens=max_tokens,
                        finish=ans.finish,
                        tokens_per_chunk=b.tokens_per_chunk,
                        call_id=uuid.uuid4().hex[:8],
                    )
                )
                continue
            if scored is not None:
                text = scored["text"]
            elif b.answer_fn is not None:
                text = b.answer_fn(prompt, body, index)
            else:
                variant = ""
                if temperature > 0:
                    variant = f"|seed={seed}|i={i}" if seed is not None else f"|r={arrival}|i={i}"
                text = default_answer(prompt, chat=chat, correct_ratio=b.correct_ratio, variant=variant)
            plans.append(
                plan_choice(
                    index,
                    text,
                    reasoning=reasoning,
                    max_tokens=max_tokens,
                    stops=stop,
                    tokens_per_chunk=b.tokens_per_chunk,
                    ignore_eos=bool(body.get("ignore_eos", False)),
                    min_tokens=min_tokens,
                    seed=f"{prompt}|{seed}|{index}",
                )
            )
    return Job(
        chat=chat,
        model=model,
        prompts=prompts,
        prompt_tokens=prompt_tokens,
        n=n,
        stream=stream,
        include_usage=bool(opts.get("include_usage", False)),
        continuous_usage=bool(opts.get("continuous_usage_stats", False)),
        plans=plans,
        rid=("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex,
        created=int(time.time()),
        scored=scored,
    )


# --------------------------------------------------------------------------------------- serialization


def usage_dict(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }


class Encoder:
    def __init__(
        self,
        state: ServerState,
        job: Job,
        null_content: bool,
        hostile_mode: str | None = None,
        model: str | None = None,
    ) -> None:
        """``model``: the id the chunks name (default: the requested model's)."""
        self.job = job
        self.model = model or job.model
        self.null = null_content
        self.hostile = hostile_mode
        self.obj = "chat.completion.chunk" if job.chat else "text_completion"
        self.field = state.behaviour.reasoning_field
        self.ptoks = sum(len(t) for t in job.prompt_tokens)

    def _event(self, choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> bytes:
        d: dict[str, Any] = {
            "id": self.job.rid,
            "object": self.obj,
            "created": self.job.created,
            "model": self.model,
            "choices": choices,
        }
        if usage is not None:
            d["usage"] = usage
        if self.hostile:
            return hostile.encode(self.hostile, d)
        return b"data: " + orjson.dumps(d) + b"\n\n"

    def role(self, index: int) -> bytes:
        delta = {"role": "assistant", "content": None if self.null else ""}
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": None}
        return self._event([choice], usage_dict(self.ptoks, 0) if self.job.continuous_usage else None)

    def step(self, plan: ChoicePlan, j: int, tokens_so_far: int) -> bytes:
        st = plan.steps[j]
        final = j == len(plan.steps) - 1
        choice: dict[str, Any] = {"index": plan.index}
        text: str | None = None if (self.null and st.kind == "content") else st.text
        if self.job.chat and st.kind == "tool":
            choice["delta"] = {"tool_calls": [st.tool] if st.tool is not None else []}
        elif self.job.chat:
            key = self.field if st.kind == "reasoning" else "content"
            choice["delta"] = {key: text}
        else:
            choice["text"] = text
        choice["logprobs"] = None
        choice["finish_reason"] = plan.finish_reason if final else None
        if final or not self.job.chat:
            choice["stop_reason"] = plan.stop_reason if final else None
        usage = usage_dict(self.ptoks, tokens_so_far) if self.job.continuous_usage else None
        event = self._event([choice], usage)
        return event + hostile.extra_line(self.hostile) if self.hostile and j == 0 else event

    def final_usage(self) -> bytes:
        return self._event([], usage_dict(self.ptoks, sum(p.completion_tokens for p in self.job.plans)))

    def full(self) -> dict[str, Any]:
        choices: list[dict[str, Any]] = []
        for p in self.job.plans:
            text = None if self.null else p.text
            c: dict[str, Any] = {"index": p.index}
            if self.job.chat:
                msg: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
                msg["annotations"] = None
                msg["audio"] = None
                msg["function_call"] = None
                msg["tool_calls"] = p.tool_calls or []
                msg[self.field] = p.reasoning
                c["message"] = msg
            else:
                c["text"] = text
            c.update(logprobs=None, finish_reason=p.finish_reason, stop_reason=p.stop_reason)
            if not self.job.chat:
                c["prompt_logprobs"] = None
            if self.job.scored is not None:
                c["token_ids"] = self.job.scored["token_ids"][: p.completion_tokens]
                if not self.job.chat:
                    c["logprobs"] = self.job.scored["logprobs"]
                    c["prompt_logprobs"] = self.job.scored["prompt_logprobs"]
                    c["prompt_token_ids"] = self.job.scored["prompt_token_ids"]
            choices.append(c)
        usage = usage_dict(self.ptoks, sum(p.completion_tokens for p in self.job.plans))
        usage["prompt_tokens_details"] = None
        out = {
            "id": self.job.rid,
            "object": "chat.completion" if self.job.chat else "text_completion",
            "created": self.job.created,
            "model": self.model,
            "choices": choices,
            "service_tier": None,
            "system_fingerprint": None,
            "usage": usage,
            "prompt_logprobs": None,
            "kv_transfer_params": None,
        }
        if self.job.chat and self.job.scored is not None:  # vLLM's chat answer carries them beside the choices
            out["prompt_logprobs"] = self.job.scored["prompt_logprobs"]
            out["prompt_token_ids"] = self.job.scored["prompt_token_ids"]
        return out
