"""A provider double that behaves like DeepSeek V4 with thinking mode on (its default).

Its checks follow DeepSeek's thinking-mode guide (api-docs.deepseek.com/guides/thinking_mode,
Chinese page 思考模式; read 2026-12-01) and the guide's multi-turn tool-call example
(api_samples/thinking_mode_api_example_tool_call), which appends every assistant message whole
— `reasoning_content` included — to the messages of all later requests:

- thinking is on unless the body says `"thinking": {"type": "disabled"}`;
- "between two user messages, if the model called tools, the assistant messages'
  `reasoning_content` takes part in the context and must be passed back in all later
  requests": a body in which any assistant message of such a span lacks it is refused with
  400, as the API does ("Missing `reasoning_content` field in the assistant message at message
  index N"). An empty string is refused too: the guide does not say it is accepted;
- between user messages without tool calls the field is ignored, so its absence is accepted;
- the limit is `max_tokens`, and in thinking mode it counts the chain of thought
  (`thinking_tokens` of them): a limit at or below it ends with `finish_reason: "length"` and
  empty content;
- tool-call ordering and message shapes are OpenAI's (`openai_contract`).

`ProxiedDeepSeekDouble` is the same model behind a generic OpenAI-compatible endpoint (a proxy,
a self-hosted deployment): its refusal of a missing `reasoning_content` is the one sentence
DeepSeek's API answers with ("The `reasoning_content` in the thinking mode must be passed back
to the API."), and nothing tells a client that it is DeepSeek but the model's name.

Replies: `/tool NAME {json}` in the latest user message calls that tool (when the body offers
tools); after tool results, an answer citing them; otherwise an answer to the question. Every
reply in thinking mode carries `reasoning_content`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tests.support.openai_contract import ordering_violations, schema_violations
from tests.support.provider_double import CHAT_PATH, ProviderDouble, ScriptedReply

__all__ = ["REASONING_REFUSAL", "DeepSeekDouble", "ProxiedDeepSeekDouble", "missing_reasoning"]

_TOOL = re.compile(r"/tool\s+([A-Za-z0-9_-]+)\s*")
REASONING_REFUSAL = "The `reasoning_content` in the thinking mode must be passed back to the API."
# Body fields DeepSeek reads beyond OpenAI's schema.
_DEEPSEEK_FIELDS = ("thinking",)


def thinking(document: dict[str, Any]) -> bool:
    """Return whether a body runs in thinking mode (on unless disabled)."""
    value = document.get("thinking")
    return not (isinstance(value, dict) and value.get("type") == "disabled")


def missing_reasoning(messages: list[dict[str, Any]]) -> list[int]:
    """Return the indexes of assistant messages of a tool-call span without reasoning."""
    missing: list[int] = []
    span: list[int] = []
    called = False
    for index, message in enumerate([*messages, {"role": "user"}]):
        if message.get("role") == "user":
            if called:
                missing += [i for i in span if not messages[i].get("reasoning_content")]
            span, called = [], False
        elif message.get("role") == "assistant":
            span.append(index)
            called = called or bool(message.get("tool_calls"))
    return missing


class DeepSeekDouble(ProviderDouble):
    """A DeepSeek V4 stand-in on 127.0.0.1 (see the module docstring for its rules)."""

    def __init__(self) -> None:
        super().__init__()
        self.models = [{"id": "deepseek-v4-flash", "object": "model", "owned_by": "deepseek"}]
        self.thinking_tokens = 0
        # Extra characters of reasoning on every reply (a long chain of thought).
        self.reasoning_padding = 0
        self.replies = 0

    def violations(self, document: dict[str, Any]) -> list[str]:
        messages = document.get("messages") or []
        plain = {k: v for k, v in document.items() if k not in _DEEPSEEK_FIELDS}
        plain["messages"] = [
            {k: v for k, v in m.items() if k != "reasoning_content"}
            for m in messages
            if isinstance(m, dict)
        ]
        problems = schema_violations(plain) + ordering_violations(plain["messages"])
        if thinking(document):
            problems += [
                f"Missing `reasoning_content` field in the assistant message at message index {i}"
                for i in missing_reasoning(messages)
            ]
        return problems

    def _default(self, method: str, path: str, document: Any) -> ScriptedReply:
        if not (method == "POST" and path == CHAT_PATH):
            return super()._default(method, path, document)
        self.replies += 1
        thinks = thinking(document)
        limit = document.get("max_tokens")
        message: dict[str, Any] = {"role": "assistant", "content": ""}
        finish = "stop"
        if thinks and isinstance(limit, int) and limit <= self.thinking_tokens:
            message["reasoning_content"] = "thinking " * limit
            finish = "length"
        else:
            message, finish = self._answer(document.get("messages") or [], document.get("tools"))
            if thinks:
                padding = " …" * (self.reasoning_padding // 2)
                message["reasoning_content"] = f"thinking NONCE-R{self.replies}{padding}"
        return ScriptedReply(200, self._completion(message, finish, document))

    def _answer(self, messages: list[dict[str, Any]], tools: Any) -> tuple[dict[str, Any], str]:
        if messages and messages[-1].get("role") == "tool":
            results = []
            for message in reversed(messages):
                if message.get("role") != "tool":
                    break
                results.insert(0, str(message.get("content"))[:200])
            return {"role": "assistant", "content": "Tool results: " + "; ".join(results)}, "stop"
        users = [m for m in messages if m.get("role") == "user"]
        question = str(users[-1].get("content")) if users else ""
        calls = []
        position = 0
        while tools and (match := _TOOL.search(question, position)):
            try:
                arguments, position = json.JSONDecoder().raw_decode(question, match.end())
            except ValueError:
                arguments, position = {}, match.end()
            calls.append(
                {
                    "id": f"call_{self.replies}_{len(calls) + 1}",
                    "type": "function",
                    "function": {"name": match.group(1), "arguments": json.dumps(arguments)},
                }
            )
        if calls:
            return {"role": "assistant", "content": "", "tool_calls": calls}, "tool_calls"
        return {"role": "assistant", "content": f"You asked: {question[:200]}"}, "stop"

    @staticmethod
    def _completion(message: dict[str, Any], finish: str, document: Any) -> dict[str, Any]:
        return {
            "id": "chatcmpl-deepseek-double",
            "object": "chat.completion",
            "created": 0,
            "model": document.get("model", "deepseek-v4-flash"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
        }


class ProxiedDeepSeekDouble(DeepSeekDouble):
    """DeepSeek's model behind a generic endpoint: one refusal sentence for missing reasoning."""

    def __init__(self) -> None:
        super().__init__()
        self.models = [{"id": "deepseek-v4-flash", "object": "model", "owned_by": "proxy"}]
        self.refused = 0

    def violations(self, document: dict[str, Any]) -> list[str]:
        problems = super().violations(document)
        if any(problem.startswith("Missing `reasoning_content`") for problem in problems):
            self.refused += 1
            return [REASONING_REFUSAL]
        return problems
