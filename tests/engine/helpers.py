"""Shared helpers of the engine tests."""

from __future__ import annotations

import difflib
import json
from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from agentloom.engine import (
    Checkpoint,
    ContextBinding,
    ContextOptions,
    ContextPolicy,
    EngineConfig,
    EngineHooks,
    InstanceFrame,
    JournalRecord,
    ModelBudget,
    ModelRequest,
    Record,
    create_engine,
    iter_frame_records,
)
from agentloom.engine.testing import MemoryJournal
from tests.support.openai_contract import assert_valid_request


def openai_body(request: ModelRequest) -> dict[str, Any]:
    """Return the chat-completions body a provider adapter would send for `request`."""
    body: dict[str, Any] = {"model": "x", "messages": request.messages}
    if request.tools:
        body["tools"] = request.tools
    return body


def assert_openai_valid(request: ModelRequest) -> None:
    """Fail unless OpenAI would accept this request (schema and tool-call ordering)."""
    assert_valid_request(openai_body(request))


class FakeClock:
    """A clock that moves one second each time it is read."""

    def __init__(self, start: datetime | None = None):
        self.now = start or datetime(2026, 10, 9, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


def _frame_diff(expected: dict[str, Any], actual: dict[str, Any]) -> str:
    lines = difflib.unified_diff(
        json.dumps(expected, indent=1).splitlines(),
        json.dumps(actual, indent=1).splitlines(),
        "saved",
        "rebuilt",
        lineterm="",
    )
    return "a format 2 frame rebuilt differently:\n" + "\n".join(list(lines)[:80])


class Recorder:
    """Collects what an engine hands out: saved frames and model-call records.

    Every save is also journaled in memory and its by-reference frame is rebuilt at once and
    compared with the live frame, so every engine test checks the `format: 2` round trip.
    """

    def __init__(self, journal: MemoryJournal | None = None, run_id: Any = 1):
        self.saves: list[dict[str, Any]] = []
        self.stored: list[dict[str, Any]] = []
        self.calls: list[Any] = []
        self.journal = journal or MemoryJournal()
        self.history_from_journal = journal is not None
        self.run_id = run_id

    def store(self):
        return self.journal.store(self.run_id)

    def save(self, checkpoint: Checkpoint) -> None:
        # A round trip through JSON proves the frame is serialisable and freezes this moment.
        full = json.loads(json.dumps(checkpoint.full()))
        self.saves.append(full)
        self.journal.sync(self.run_id, checkpoint)
        stored = json.loads(json.dumps(checkpoint.frame))
        self.stored.append(stored)
        if stored["context"]["inherited"]["history"] and not self.history_from_journal:
            return  # history projected from a journal this recorder does not hold
        rebuilt = InstanceFrame.from_dict(stored, store=self.store()).to_dict()
        assert json.dumps(rebuilt) == json.dumps(full), _frame_diff(full, rebuilt)

    def on_model_call(self, record) -> None:
        self.calls.append(record)


_HOOKS = {hook.name for hook in fields(EngineHooks)}
# The fields of a `ContextBinding` a test may name beside its policy and budget.
_BINDING = {"estimator", "large_records", "rendering", "compaction"}


def _binding(policy, budget, options: dict[str, Any]) -> ContextBinding:
    """Return the binding of a test's `policy` and `budget`, popping its fields from `options`."""
    named = {name: options.pop(name) for name in list(options) if name in _BINDING}
    return ContextBinding(
        policy if policy is not None else ContextPolicy(),
        budget or ModelBudget(32_768, 4_096, 1_024),
        **named,
    )


def make_engine(
    gateway, *, tools=("echo",), policy=None, budget=None, recorder=None, config=None, **options
):
    """Return an engine with a default policy and budget, wired to a recorder.

    `options` are hooks (fields of `EngineHooks`, beside the recorder's `save` and
    `on_model_call`), fields of the `ContextBinding` (`estimator`, `large_records`, `rendering`,
    `compaction`) or options (fields of `EngineConfig`, applied over `config`).
    """
    recorder = recorder or Recorder()
    hooks = {name: options.pop(name) for name in list(options) if name in _HOOKS}
    return create_engine(
        gateway,
        list(tools),
        _binding(policy, budget, options),
        hooks=EngineHooks(save=recorder.save, on_model_call=recorder.on_model_call, **hooks),
        config=replace(config or EngineConfig(), **options),
    )


def kinds(frame: dict[str, Any]) -> list[str]:
    return [record["kind"] for record in frame["context"]["records"]]


def keys(frame: dict[str, Any]) -> list[str]:
    return [record["entry_key"] for record in frame["context"]["records"]]


def records_of(frame: dict[str, Any]) -> list[Record]:
    return [Record.from_dict(item) for item in frame["context"]["records"]]


class SessionJournal:
    """The session journal as the database keeps it: ordered rows, deduplicated by entry key."""

    def __init__(self):
        self.rows: list[JournalRecord] = []
        self._seen: set[tuple[Any, str, str]] = set()

    def sync(self, run_id: Any, frame: dict[str, Any]) -> list[JournalRecord]:
        """Append the frame's records not yet in the journal; return the new rows."""
        added = []
        for instance, record in iter_frame_records(frame):
            key = (run_id, instance, record["entry_key"])
            if key in self._seen:
                continue
            self._seen.add(key)
            row = JournalRecord(
                len(self.rows) + 1,
                run_id,
                instance,
                record["kind"],
                record["message"],
                record["entry_key"],
            )
            self.rows.append(row)
            added.append(row)
        return added


def new_context(policy=None, budget=None, *, task="the task NONCE-TASK", history=None, **options):
    """Return a main-instance context of run 1 with the system prompt `sys` and `task`.

    `options` are fields of the `ContextBinding` beside `policy` and `budget`, or of
    `ContextOptions` (its clock is a `FakeClock` unless given).
    """
    from agentloom.engine import JournalContextManager

    binding = _binding(policy, budget, options)
    context = JournalContextManager(binding, ContextOptions(**{"clock": FakeClock(), **options}))
    context.create(
        instance="main",
        system_prompt="sys",
        task=task,
        run_number=1,
        attempt=1,
        history=history,
    )
    return context


def add_group(context, results: list[str], name: str = "echo") -> list[str]:
    """Record one assistant message calling `name` once per result, then the results."""
    calls = [
        {"id": f"p{n}", "type": "function", "function": {"name": name, "arguments": "{}"}}
        for n in range(len(results))
    ]
    record = context.add_assistant({"role": "assistant", "content": None, "tool_calls": calls})
    ids = [call["id"] for call in record.message["tool_calls"]]
    for call_id, text in zip(ids, results, strict=True):
        context.add_tool_result(call_id, text)
    return ids


def snapshot(context) -> dict[str, Any]:
    """Return a deep copy of what compaction must leave alone when it does not succeed."""
    frame = context.frame
    return json.loads(
        json.dumps(
            {
                "records": [r.to_dict() for r in frame.records],
                "messages": frame.messages,
                "counters": frame.counters.to_dict(),
                "compactions": frame.compactions,
            }
        )
    )
