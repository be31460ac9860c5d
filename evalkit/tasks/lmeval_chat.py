"""lm-eval's chat formatting of ``lm-eval:NAME`` tasks (``--apply-chat-template``, ``--fewshot-as-multiturn``,
``--system-instruction``), done by lm-eval itself as ``lm_eval --model local-chat-completions --apply_chat_template``
does it: ``ConfigurableTask.build_all_requests`` is given the options and lm-eval's chat API model's
``apply_chat_template`` (which returns the messages as a JSON string), the messages sent are what that model's
``create_message`` decodes, and the sampling fields what its ``_create_payload`` puts in the request body.

- :func:`chat_options` checks the command's options and turns them into the task file's ``lm_eval.chat`` entry;
- :class:`ChatPrompts` is that entry on a task: the arguments of ``build_all_requests``, the suffix of the task's
  version (so runs with other prompts are never resumed into, nor gated against, each other), the messages and
  sampling fields of one request.
"""

from __future__ import annotations

import copy
import functools
import hashlib
from dataclasses import dataclass
from typing import Any

from evalkit.errors import ConfigError, TaskError


def chat_options(
    apply_chat_template: bool, fewshot_as_multiturn: bool | None, system_instruction: str | None
) -> dict[str, Any] | None:
    """The ``lm_eval.chat`` entry of the run's lm-eval task files (None: lm-eval's plain prompts), with lm-eval's
    CLI defaults: few-shot examples as turns when the chat template is applied, unless told otherwise."""
    if fewshot_as_multiturn and not apply_chat_template:
        raise ConfigError("--fewshot-as-multiturn needs --apply-chat-template (as lm-eval's --fewshot_as_multiturn)")
    if not apply_chat_template and system_instruction is None:
        return None
    multiturn = apply_chat_template if fewshot_as_multiturn is None else fewshot_as_multiturn
    return {
        "apply_chat_template": bool(apply_chat_template),
        "fewshot_as_multiturn": bool(multiturn),
        "system_instruction": system_instruction,
    }


@functools.lru_cache(maxsize=1)
def chat_model() -> Any:
    """lm-eval's ``local-chat-completions`` model as its CLI makes it without a tokenizer (nothing is sent by it:
    evalkit uses its prompt formatting and request body only)."""
    from lm_eval.models.openai_completions import LocalChatCompletion

    return LocalChatCompletion(base_url="http://127.0.0.1/v1/chat/completions", model="evalkit")


@dataclass(frozen=True)
class ChatPrompts:
    """How a task's prompts are formatted: lm-eval's plain text (all off), its system instruction, its chat
    messages (``apply_chat_template``), few-shot examples as separate turns (``fewshot_as_multiturn``)."""

    apply_chat_template: bool = False
    fewshot_as_multiturn: bool = False
    system_instruction: str | None = None

    @classmethod
    def from_options(cls, raw: Any, task: str) -> ChatPrompts:
        if raw is None:
            return cls()
        if not isinstance(raw, dict) or set(raw) - {
            "apply_chat_template",
            "fewshot_as_multiturn",
            "system_instruction",
        }:
            raise TaskError(
                f"task {task}: lm_eval.chat takes apply_chat_template, fewshot_as_multiturn and system_instruction"
            )
        system = raw.get("system_instruction")
        return cls(bool(raw.get("apply_chat_template")), bool(raw.get("fewshot_as_multiturn")), system)

    @property
    def plain(self) -> bool:
        """lm-eval's default prompts (no chat template, no system instruction)."""
        return self == ChatPrompts()

    def record(self) -> dict[str, Any]:
        return {
            "apply_chat_template": self.apply_chat_template,
            "fewshot_as_multiturn": self.fewshot_as_multiturn,
            "system_instruction": self.system_instruction,
        }

    def version_suffix(self) -> str:
        """What the task's version gains: ``+chat`` or ``+chat-multiturn``, ``+sys.<8 hex of the instruction>``."""
        out = ""
        if self.apply_chat_template:
            out += "+chat-multiturn" if self.fewshot_as_multiturn else "+chat"
        if self.system_instruction is not None:
            out += "+sys." + hashlib.sha256(self.system_instruction.encode()).hexdigest()[:8]
        return out

    def build_kwargs(self) -> dict[str, Any]:
        """The chat arguments lm-eval's ``evaluate`` gives ``build_all_requests`` for a chat API model."""
        if self.plain:
            return {}
        return {
            "system_instruction": self.system_instruction,
            "apply_chat_template": self.apply_chat_template,
            "fewshot_as_multiturn": self.fewshot_as_multiturn,
            "chat_template": chat_model().apply_chat_template if self.apply_chat_template else None,
        }

    def check_output_type(self, task: str, output_type: str) -> None:
        """Chat messages are for generations: lm-eval's chat API model has no loglikelihood."""
        if self.apply_chat_template and output_type != "generate_until":
            raise TaskError(
                f"task {task}: --apply-chat-template is for generate_until tasks; a {output_type} task is scored by "
                "loglikelihood, which lm-eval's chat API model cannot do (run it without --apply-chat-template)"
            )


def context_text(context: Any) -> str:
    """A request's context as text: lm-eval's chat messages as their JSON string, a plain prompt as it is."""
    from lm_eval.models.api_models import JsonChatStr

    return context.prompt if isinstance(context, JsonChatStr) else str(context)


def messages(context: str) -> tuple[dict[str, str], ...]:
    """The messages lm-eval's chat API model sends for a context built with its chat template."""
    from lm_eval.models.api_models import JsonChatStr

    return tuple(chat_model().create_message([JsonChatStr(context)]))


def last_user_text(msgs: tuple[dict[str, str], ...]) -> str:
    """The text of the last user message (a request's ``prompt`` for chat)."""
    return next((str(m.get("content", "")) for m in reversed(msgs) if m.get("role") == "user"), "")


def chat_body(gen_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The sampling fields lm-eval's chat API model puts in the request body for these generation kwargs
    (``max_tokens``, ``temperature``, ``stop`` (at most 4, no EOS string without a tokenizer), ``seed``, and any
    other kwarg as it is)."""
    lm = chat_model()
    body: dict[str, Any] = lm._create_payload(
        [], generate=True, gen_kwargs=copy.deepcopy(gen_kwargs), seed=lm._seed, eos=lm.eos_string
    )
    body.pop("messages", None)
    body.pop("model", None)
    return body
