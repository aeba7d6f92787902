"""Project the session journal into the inherited history of a new run.

Projection repairs protocol and never changes sources:

- a tool call with no recorded result is answered with a `status: unknown` tool message that says
  success must not be assumed (the call is never re-executed);
- a result that arrives after its group was closed (a late result, e.g. from resuming an old run
  after later runs) is kept as a user-role note, not as a tool message that would break protocol;
- call ids are rewritten to `h<seq>_<n>` (session seq of the assistant record, call number), so
  history ids cannot collide with each other or with the new run's ids;
- notes (supplements, feedback, run states, late results) that arrive while a tool group is open
  wait until the group is complete, so nothing sits between a call and its results;
- tool results are capped at the view's 24,000 characters, with a visible marker.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentloom.engine.protocol import (
    FEEDBACK_PREFIX,
    TOOL_RESULT_VIEW_CHARS,
    UNKNOWN_RESULT,
    cap_tool_result,
    message_text,
)
from agentloom.engine.records import MAIN_INSTANCE

__all__ = ["JournalRecord", "ProjectedHistory", "ReusableView", "project_history"]


@dataclass(frozen=True)
class JournalRecord:
    """One row of the session journal: `seq` is the session seq (ordered, gaps allowed)."""

    seq: int
    run_id: Any
    instance: str
    kind: str
    message: dict[str, Any]


@dataclass(frozen=True)
class ReusableView:
    """A saved compacted view that stands for the session's main records up to `watermark`."""

    watermark: int
    messages: list[dict[str, Any]]
    user_turns: int = 0
    model_steps: int = 0
    baseline_user_turns: int = 0
    baseline_model_steps: int = 0
    revision: int | None = None

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> ReusableView:
        return cls(
            watermark=int(data["watermark"]),
            messages=list(data["messages"]),
            user_turns=int(data.get("user_turns", 0)),
            model_steps=int(data.get("model_steps", 0)),
            baseline_user_turns=int(data.get("baseline_user_turns", 0)),
            baseline_model_steps=int(data.get("baseline_model_steps", 0)),
            revision=data.get("revision"),
        )


@dataclass
class ProjectedHistory:
    """The history a new run inherits, with the session totals and baselines it starts from."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    watermark: int = 0
    user_turns: int = 0
    model_steps: int = 0
    baseline_user_turns: int = 0
    baseline_model_steps: int = 0
    view_revision: int | None = None


def _tool_message(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


class _OpenGroup:
    __slots__ = ("answered", "ids", "run_id")

    def __init__(self, run_id: Any, ids: dict[str, str]):
        self.run_id = run_id
        self.ids = ids  # original call id -> rewritten id, in call order
        self.answered: set[str] = set()


class _Projector:
    def __init__(self, messages: list[dict[str, Any]], cap: int):
        self.out = messages
        self.cap = cap
        self.group: _OpenGroup | None = None
        self.deferred: list[dict[str, Any]] = []
        # (run id, original call id) -> (rewritten id, tool name), to describe late results.
        self.calls: dict[tuple[Any, str], tuple[str, str]] = {}
        # Calls whose recorded result has been placed, in their group or as a late note.
        self.answered: set[tuple[Any, str]] = set()

    def close_group(self) -> None:
        group = self.group
        if group is None:
            return
        for original, rewritten in group.ids.items():
            if original not in group.answered:
                self.out.append(_tool_message(rewritten, UNKNOWN_RESULT))
        self.group = None
        self.out.extend(self.deferred)
        self.deferred.clear()

    def note(self, text: str) -> None:
        message = {"role": "user", "content": text}
        if self.group is None:
            self.out.append(message)
        else:
            self.deferred.append(message)

    def assistant(self, record: JournalRecord) -> None:
        self.close_group()
        message = record.message
        calls = message.get("tool_calls") or []
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            content = message_text(message)
        if not calls:
            self.out.append({"role": "assistant", "content": content or ""})
            return
        ids: dict[str, str] = {}
        rewritten_calls = []
        for number, call in enumerate(calls, start=1):
            function = call.get("function") or {}
            arguments = function.get("arguments", "")
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments, ensure_ascii=False)
            new_id = f"h{record.seq}_{number}"
            original = str(call.get("id") or new_id)
            ids[original] = new_id
            name = str(function.get("name") or "")
            self.calls[(record.run_id, original)] = (new_id, name)
            rewritten_calls.append(
                {
                    "id": new_id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            )
        self.out.append({"role": "assistant", "content": content, "tool_calls": rewritten_calls})
        self.group = _OpenGroup(record.run_id, ids)

    def tool_result(self, record: JournalRecord) -> None:
        original = str(record.message.get("tool_call_id") or "")
        content = cap_tool_result(message_text(record.message), self.cap)
        key = (record.run_id, original)
        group = self.group
        if (
            group is not None
            and group.run_id == record.run_id
            and original in group.ids
            and original not in group.answered
        ):
            group.answered.add(original)
            self.answered.add(key)
            self.out.append(_tool_message(group.ids[original], content))
            if len(group.answered) == len(group.ids):
                self.close_group()
            return
        if key in self.calls:
            rewritten, name = self.calls[key]
            which = "another" if key in self.answered else "late"
            self.answered.add(key)
            self.note(
                f"[{which} tool result of call {rewritten} ({name}) from run {record.run_id}; "
                f"recorded after its turn had closed]\n{content}"
            )
            return
        self.note(f"[tool result of unknown call {original!r} from run {record.run_id}]\n{content}")

    def add(self, record: JournalRecord) -> None:
        kind = record.kind
        if kind == "assistant":
            self.assistant(record)
        elif kind == "tool_result":
            self.tool_result(record)
        elif kind == "user_input":
            self.close_group()
            self.out.append({"role": "user", "content": message_text(record.message)})
        elif kind == "supplement":
            self.note(message_text(record.message))
        elif kind == "feedback":
            text = message_text(record.message)
            self.note(text if text.startswith(FEEDBACK_PREFIX) else FEEDBACK_PREFIX + text)
        elif kind == "status":
            status = record.message.get("status")
            error = record.message.get("error")
            suffix = f": {error}" if error else ""
            self.note(f"[run {record.run_id} {status}{suffix}]")
        else:
            self.note(f"[{kind} record] {json.dumps(record.message, ensure_ascii=False)}")


def project_history(
    records: Iterable[JournalRecord],
    view: ReusableView | Mapping[str, Any] | None = None,
    *,
    tool_result_chars: int = TOOL_RESULT_VIEW_CHARS,
) -> ProjectedHistory:
    """Return the history a new run inherits: `view` plus the main records after its watermark.

    Without a view, every main-instance record is projected. Totals are the view's plus the
    records after its watermark; baselines are the view's (zero without one).
    """
    if view is not None and not isinstance(view, ReusableView):
        view = ReusableView.from_mapping(view)
    history = ProjectedHistory()
    if view is not None:
        history = ProjectedHistory(
            messages=list(view.messages),
            watermark=view.watermark,
            user_turns=view.user_turns,
            model_steps=view.model_steps,
            baseline_user_turns=view.baseline_user_turns,
            baseline_model_steps=view.baseline_model_steps,
            view_revision=view.revision,
        )
    projector = _Projector(history.messages, tool_result_chars)
    floor = history.watermark
    for record in records:
        # Child instances' inner messages are not inherited; only the main instance's are.
        if record.seq <= floor or record.instance != MAIN_INSTANCE:
            continue
        history.watermark = max(history.watermark, record.seq)
        if record.kind == "user_input":
            history.user_turns += 1
        elif record.kind == "assistant":
            history.model_steps += 1
        projector.add(record)
    projector.close_group()
    return history
