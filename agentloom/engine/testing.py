"""Test doubles of the engine: a scripted gateway, a session journal in memory, history trials.

`ScriptedGateway` answers with scripted replies in order and keeps every request received;
`text_response` and `tool_call_response` build those replies.

`MemoryJournal` is the record store of by-reference frames without a database: engine tests and
benchmarks save `format: 2` checkpoints into it and resume them, exactly as the application does
with the database journal. `history_trial` generates a session history and runs a question on it
under a random budget, for the property tests and benchmarks of compaction.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from agentloom.engine._budget import ModelBudget, TokenEstimator
from agentloom.engine._context import ContextBinding
from agentloom.engine._engine import EngineConfig, ExecutionLimits, create_engine
from agentloom.engine._errors import EngineError
from agentloom.engine._gateway import ModelGateway, ModelRequest, ModelResponse
from agentloom.engine._large import LargeRecords, RecordSizer, history_judge
from agentloom.engine._measure import check_input
from agentloom.engine._policy import ContextPolicy
from agentloom.engine._projection import (
    JournalRecord,
    ProjectedHistory,
    block_excerpts,
    block_masks,
    project_history,
)
from agentloom.engine._records import MAIN_INSTANCE, Record
from agentloom.engine._refs import Origin, RecordStore
from agentloom.engine._search import Hit, SearchQuery, rank, searchable_text
from agentloom.engine._tools import ReadRecordTool, Tool

__all__ = [
    "LengthEstimator",
    "MemoryJournal",
    "ScriptExhausted",
    "ScriptedGateway",
    "Trial",
    "blob",
    "history_trial",
    "text_response",
    "tool_call_response",
]


class ScriptExhausted(EngineError):
    """A scripted gateway was asked for more replies than its script holds."""


ScriptStep = ModelResponse | Callable[[ModelRequest], ModelResponse] | BaseException


def text_response(content: str, *, usage: dict[str, Any] | None = None) -> ModelResponse:
    """Return a reply that is plain text (a final answer, a summary or a verdict)."""
    return ModelResponse(
        message={"role": "assistant", "content": content}, usage=usage, finish_reason="stop"
    )


def tool_call_response(
    *calls: tuple[str, dict[str, Any] | str], content: str | None = None
) -> ModelResponse:
    """Return a reply that calls tools: each call is `(name, arguments)`, ids `call_<n>`."""
    tool_calls = [
        {
            "id": f"call_{number}",
            "type": "function",
            "function": {
                "name": name,
                "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
            },
        }
        for number, (name, arguments) in enumerate(calls, start=1)
    ]
    return ModelResponse(
        message={"role": "assistant", "content": content, "tool_calls": tool_calls},
        finish_reason="tool_calls",
    )


class ScriptedGateway(ModelGateway):
    """Replay scripted replies in order and keep every request received, for tests.

    A script step is a `ModelResponse`, a callable that returns one for the request, or an
    exception to raise. `validate`, when given, is called with every request first, so a test can
    refuse requests a real provider would refuse.
    """

    provider = "scripted"
    model_id = "scripted"

    def __init__(
        self,
        responses: Iterable[ScriptStep] = (),
        *,
        validate: Callable[[ModelRequest], None] | None = None,
    ):
        self.script: list[ScriptStep] = list(responses)
        self.requests: list[ModelRequest] = []
        self._validate = validate

    def add(self, *steps: ScriptStep) -> None:
        """Append steps to the script."""
        self.script.extend(steps)

    def purposes(self) -> list[str]:
        """Return the purpose of every request received, in order."""
        return [request.purpose for request in self.requests]

    def complete(self, request: ModelRequest) -> ModelResponse:
        if self._validate is not None:
            self._validate(request)
        self.requests.append(request)
        if not self.script:
            raise ScriptExhausted(f"no scripted reply left for request {len(self.requests)}")
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        if callable(step):
            return step(request)
        return step


class MemoryJournal:
    """Ordered session rows deduplicated by (run, instance, entry key), plus each run's records."""

    def __init__(self) -> None:
        self.rows: list[JournalRecord] = []
        self.records: dict[tuple[Any, str], list[Record]] = {}
        self._seen: set[tuple[Any, str, str]] = set()

    def sync(self, run_id: Any, checkpoint: Any) -> list[JournalRecord]:
        """Journal a checkpoint's new records (an engine `save` hook); return the new rows."""
        added = []
        for instance, record in checkpoint.records:
            key = (run_id, instance, record.entry_key)
            if key in self._seen:
                continue
            self._seen.add(key)
            self.records.setdefault((run_id, instance), []).append(record)
            row = JournalRecord(
                len(self.rows) + 1,
                run_id,
                instance,
                record.kind,
                record.message,
                record.entry_key,
                record.seq,
            )
            self.rows.append(row)
            added.append(row)
        return added

    def history(
        self,
        upto: int | None = None,
        *,
        binding: dict[str, Any] | None = None,
        rendering: int | None = None,
    ) -> ProjectedHistory:
        """Return what a new run inherits from the rows up to `upto` (all by default).

        With a run's `binding`, large records are shown as its large-record policy says;
        `rendering` is the version of the rules (default: the current one).
        """
        return project_history(
            (row for row in self.rows if upto is None or row.seq <= upto),
            judge=history_judge(binding) if binding else None,
            rendering=rendering,
        )

    def store(self, run_id: Any) -> RecordStore:
        """Return the record store a frame of run `run_id` resolves its references with."""
        return _Store(self, run_id)


class _Store(RecordStore):
    def __init__(self, journal: MemoryJournal, run_id: Any):
        self.source = journal
        self.run_id = run_id

    def records(self, instance: str) -> list[Record]:
        return list(self.source.records.get((self.run_id, instance), []))

    def journal(self, seqs: Collection[int]) -> dict[int, dict[str, Any]]:
        return {row.seq: row.message for row in self.source.rows if row.seq in seqs}

    def history(
        self, block: dict[str, Any], *, rendering: int
    ) -> tuple[list[dict[str, Any]], list[Origin]]:
        if block.get("view") is not None:
            raise LookupError("the memory journal keeps no reusable views")
        rows = [
            row
            for row in self.source.rows
            if block["after"] < row.seq <= block["upto"] and row.instance == MAIN_INSTANCE
        ]
        history = project_history(
            rows,
            tool_result_chars=block["cap"],
            excerpts=block_excerpts(block),
            masks=block_masks(block),
            rendering=rendering,
        )
        return history.messages, history.origins

    def main_record(
        self,
        *,
        up_to: int,
        seq: int | None = None,
        run: int | None = None,
        local: int | None = None,
    ) -> dict[str, Any] | None:
        for row in self.source.rows:
            if row.seq > up_to or row.instance != MAIN_INSTANCE:
                continue
            if seq is not None and row.seq == seq:
                return row.message
            if seq is None and row.run_id == run:
                records = self.source.records.get((run, MAIN_INSTANCE), [])
                if any(r.seq == local and r.message is row.message for r in records):
                    return row.message
        return None

    def search(self, query: SearchQuery, *, up_to: int) -> list[Hit]:
        # What the app's keyed index answers, by scanning: main records up to the watermark
        # (`run_id` is the run number in a memory journal).
        return rank(
            query,
            (
                Hit(
                    f"s:{row.seq}", row.kind, row.run_id, searchable_text(row.message), (0, row.seq)
                )
                for row in self.source.rows
                if row.seq <= up_to
                and row.instance == MAIN_INSTANCE
                and row.kind != "status"
                and query.admits(row.kind, row.run_id)
            ),
        )


class LengthEstimator(TokenEstimator):
    """A quarter of each text's characters plus a few per message and tool.

    It reads only string lengths, so a trial over records of millions of characters stays
    cheap; trials use it because they test the rules, not a tokenizer.
    """

    module_id = "agentloom.engine.testing.LengthEstimator/1"
    config: dict[str, Any] = {}

    def estimate(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        total = 3
        for message in messages:
            content = message.get("content")
            total += 4 + (len(content) // 4 if isinstance(content, str) else 0)
            for call in message.get("tool_calls") or ():
                total += 8 + len(call["function"]["arguments"]) // 4
        for tool in tools:
            total += 24 + len(json.dumps(tool)) // 4
        return total


_BLOBS: dict[int, str] = {}


def blob(chars: int) -> str:
    """Return a text of about `chars` characters (sizes are rounded, texts shared)."""
    size = int(1.25 ** round(math.log(max(chars, 1), 1.25)))
    if size not in _BLOBS:
        _BLOBS[size] = ("lorem ipsum dolor sit amet " * (size // 27 + 1))[:size]
    return _BLOBS[size]


class _BlobTool(Tool):
    name = "blob"
    description = "Return a text of the given length."
    parameters = {
        "type": "object",
        "properties": {"chars": {"type": "integer", "minimum": 0}},
        "required": ["chars"],
        "additionalProperties": False,
    }

    def run(self, arguments: dict[str, Any]) -> str:
        return blob(arguments["chars"])


@dataclass
class Trial:
    """One generated history and run: what it was and what happened."""

    effective: int
    refused: bool = False
    pinned_over_budget: bool = False
    status: str | None = None
    error: str | None = None
    compactions: list[dict[str, Any]] = field(default_factory=list)
    requests_over_budget: int = 0
    summary_calls: int = 0


class _TrialGateway(ModelGateway):
    """Calls `blob` a few times (and `read_record` once when it can), then answers."""

    def __init__(self, rng: random.Random, sizes: Callable[[], int], trial: Trial, estimator):
        self.steps = [sizes() for _ in range(rng.randint(0, 4))]
        self.read = rng.random() < 0.5
        self.trial = trial
        self.estimator = estimator

    def complete(self, request: ModelRequest) -> ModelResponse:
        if self.estimator.upper_bound(request.messages, request.tools) > self.trial.effective:
            self.trial.requests_over_budget += 1
        if request.purpose == "compaction":
            self.trial.summary_calls += 1
            return text_response("summary: the earlier work in a few words")
        last = request.messages[-1]
        offered = {tool["function"]["name"] for tool in request.tools}
        if self.read and "read_record" in offered and last.get("role") == "tool":
            self.read = False
            ref = re.search(r'read_record\(ref="([^"]+)"', str(last.get("content")))
            if ref:
                return tool_call_response(("read_record", {"ref": ref[1], "offset": 10}))
        if self.steps:
            return tool_call_response(("blob", {"chars": self.steps.pop()}))
        return text_response("done")


def history_trial(rng: random.Random, *, door: bool = True, large: bool = True) -> Trial:
    """Generate a history and a run on a budget of 2K to 200K, records up to 50x the budget.

    The run's question is checked at the door as the application does (`check_input`); one
    that is refused is not run, unless `door` is False. Without `large`, the run is a version
    published before the large-record policy (for comparison).
    """
    window = int(2_000 * 100 ** rng.random())
    budget = ModelBudget(window, max(window // 8, 64), window // 32)
    effective = budget.effective_input_budget
    trial = Trial(effective=effective)
    estimator = LengthEstimator()
    policy = ContextPolicy()
    policy_of_large = LargeRecords()
    sizer = RecordSizer(policy_of_large.limit(budget), estimator)

    def sizes() -> int:
        # Characters of about 0.001x to 50x the budget (four characters a unit), mostly small.
        return int(4 * effective * 10 ** rng.uniform(-3, math.log10(50)))

    rows: list[JournalRecord] = []
    for run in range(1, rng.randint(0, 3) + 1):
        rows.append(_row(rows, run, "user_input", {"role": "user", "content": blob(sizes())}))
        if rng.random() < 0.6:
            call = {"id": "c1", "type": "function", "function": {"name": "blob", "arguments": "{}"}}
            rows.append(
                _row(
                    rows,
                    run,
                    "assistant",
                    {"role": "assistant", "content": None, "tool_calls": [call]},
                )
            )
            rows.append(
                _row(
                    rows,
                    run,
                    "tool_result",
                    {"role": "tool", "tool_call_id": "c1", "content": blob(sizes())},
                )
            )
        rows.append(_row(rows, run, "assistant", {"role": "assistant", "content": blob(sizes())}))
    history = project_history(rows, judge=sizer.excerpt_chars if large else None)
    system = blob(rng.choice([20, 400, sizes()]))
    task = blob(sizes())
    tools: list[Tool] = [_BlobTool()]
    if large:
        tools.append(ReadRecordTool(lambda _ref, _offset, _limit: ""))
    check = check_input(
        policy=policy,
        budget=budget,
        estimator=estimator,
        system_prompt=system,
        tools=[tool.schema() for tool in tools],
        text=task,
    )
    trial.pinned_over_budget = (
        estimator.estimate(
            [{"role": "system", "content": system}, {"role": "user", "content": task}],
            [tools[0].schema()],
        )
        > effective
    )
    trial.refused = not check.fits
    if trial.refused and door:
        return trial
    engine = create_engine(
        _TrialGateway(rng, sizes, trial, estimator),
        [tools[0]],
        ContextBinding(
            policy, budget, estimator, large_records=policy_of_large.to_dict() if large else None
        ),
        config=EngineConfig(limits=ExecutionLimits(max_model_calls=64)),
    )
    outcome = engine.start(
        run_number=len(rows) + 1, attempt=1, system_prompt=system, question=task, history=history
    )
    trial.status, trial.error = outcome.status, outcome.error
    trial.compactions = list(outcome.checkpoint._source.state.compaction_log)
    return trial


def _row(rows: list[JournalRecord], run: int, kind: str, message: dict[str, Any]) -> JournalRecord:
    return JournalRecord(len(rows) + 1, run, MAIN_INSTANCE, kind, message)
