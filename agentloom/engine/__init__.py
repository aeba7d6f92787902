"""The context engine: plain Python, no Django.

Journal records, the checkpoint frame, budget and policy, compaction, projection of history,
tools, the agent loop and the model gateways. The Django side builds an engine per run with
`create_engine`, passes it projected history and persists what it hands back.

The engine's public names are the ones listed in `__all__` below, grouped by the module that
holds them, and callers import them from `agentloom.engine`; the modules with a leading
underscore are internal and may change shape freely. Test doubles (a scripted gateway and its
reply builders, an in-memory journal, generated history trials) live in `agentloom.engine.testing`,
outside this surface.

Where each rule of the design lives (each module's docstring states its rules):

- the triggers (the budget trigger at `context_ratio`, 80% of the effective input budget by
  default, and the turn and step triggers): `_policy`; the one measure of a view against them,
  the door for a question or supplement and the room for a question, and a step's payload
  measured once: `_measure`; sizes kept per item, and a record's stored size carried to the
  message history shows as recorded: `_sizecache`;
- the hard check (no request over the effective input budget is sent, measured by an upper
  bound): `_budget`, before every action, compaction and verification request; calibration moves
  the triggers only, never the hard check: `_calibration`; a call that reported no usage stays
  without usage in its record and calibrates from the server tokenizer's exact count of its
  payload, when there is one: `_engine._learn`;
- exact counts from the server's own tokenizer (the `server` estimator: each message's rendered
  text and each tool's JSON counted by the server in one batch, cached per content, plus stated
  template margins): `_server_count`; when the tokenizer fails, the last exact counts plus the
  UTF-8 bytes of what they do not cover, and a request that does not fit then is not sent, with
  an error that says to resume; the counts each call used are in its record (`counts`) and the
  per-content counts in the checkpoint (`state.token_counts`), so a resume and a replay measure
  without the server: `_engine`;
- length refusals learned from (a `context_length` refusal teaches a smaller window: the one it
  names, else bounded by the largest request that succeeded, never larger than the budget in
  force): the rule in `_budget.learned_window`; the run writes the window into its checkpoint's
  binding, journals it as a run note, announces it (`EngineHooks.on_learned`), compacts against
  it and sends the step's request once more; a window that leaves less room for a question than
  the publish floor ends the run saying to republish; a second refusal of the step ends the run:
  `_engine` (`learn_window`, `_InstanceLoop.ask_model`);
- a refusal the gateway adapts to (`ModelGateway.adapt`, such as reasoning that must go back):
  announced, the payload rebuilt, checked by the gate and the hard check, and sent once more:
  `_engine.call_model`;
- compaction (pinned content, units, segmented summaries, masking; from compaction version 5
  masking in batches, oldest first, never below the policy's `mask_batch_ratio`):
  `_compaction`;
- the observed-prefix rule (which compaction snapshot may become a reusable view): the
  application's `sessions_app/services/reusable_views.py`; the engine records what each snapshot
  observed (`covered_seq`, `_frame`);
- projection and placeholders (a call with no result answered `status: unknown`, late results as
  notes, call ids rewritten, a result a run masked shown as its stub): `_projection`, with the
  placeholder texts and the chat ordering rules in `_protocol`;
- supplements (they wait while a tool group is open, enter at a safe point, and a run never ends
  with one queued): `_context` and the agent loop in `_engine`;
- legacy adoption (a format-1 frame without records loads with `raw_complete = false`): `_frame`,
  journaled by the application's `sessions_app/services/legacy.py`; the legacy character policy:
  `_policy`;
- redaction (known credentials replaced before anything is recorded, shown or streamed):
  `_redaction`, applied to every message by `_context`;
- large records (excerpts with a reference, read back by `read_record`): `_large`, the tool in
  `_tools`;
- the integrity gate (every provider's payload checked before it is sent): `_gate`;
- approval of tool calls (the run waits at the safe point after the response that called a tool
  needing approval; `Engine.continue_run` goes on without a new attempt, each decision journaled
  as feedback, a denied call answered `denied`): `_approval`; which tool-server tools need it
  (the agent's mode, else the server's default, frozen at publish):
  `context_app/services/server_tools.py`; only the session's creator decides, each call once,
  and a wait no one decides ends `cancelled`: `sessions_app/services/approvals.py`;
- a tool server's questions to the person (the run waits `waiting_input` on an `input_required`
  answer and sends the same call again with the answers; a question asked while a call is open
  gets the answers or a decline within the call's time; questions and answers journaled after
  the tool group): `_asking`; the forms and the answer's check:
  `agentloom/toolservers/_questions.py`; who answers: `sessions_app/services/questions.py`;
- streaming (a model call's output shown as it is generated, redacted before it leaves the
  engine): the provider reads server-sent events into one chat-completion document and reports
  each piece (`agentloom/providers/_stream.py`); `_engine._DeltaRelay` redacts them, holding back
  what may begin a secret; the worker writes them to the run's live channel
  (`sessions_app/services/live.py`); the events stream serves them with each call's end
  (`sessions_app/events.py`); the console shows them as previews until the journaled record
  replaces them (`static/console/stream.js`);
- views by reference and the one definition of each view transform: `_refs`; rendering versions:
  `_rendering`; compaction versions (the procedure a checkpoint's binding names):
  `_compaction_versions`; the checkpoint frame: `_frame`; records and entry keys: `_records`;
  the lease heartbeat and cancellation relay: `_watch`; identifiers a summary keeps and search
  terms: `_identifiers`; `search_history`'s matching, ranking and result: `_search` (the tool in
  `_tools`, the visibility in the context manager, the journal's keyed index on the app side);
- spans of its operations (a tool call while it runs, the answer to a call that never runs with
  why in `NOT_RUN`, a sub-agent inside its delegation's call, a compaction attempt around its
  work and summary calls): `EngineHooks.span` in `_engine`, the
  compaction's in `_context`; the application makes them OpenTelemetry spans
  (`sessions_app/services/execution.py`, `agentloom/tracing.py`).
"""

from agentloom.engine._approval import WAITING_APPROVAL, Decision
from agentloom.engine._asking import (
    ANSWER_ACTIONS,
    WAITING_INPUT,
    Answer,
    InputReply,
    InputRequired,
)
from agentloom.engine._budget import (
    JsonBytesEstimator,
    LearnedLimit,
    ModelBudget,
    TokenEstimator,
    estimator_from_binding,
)
from agentloom.engine._calibration import (
    DEFAULT_SAMPLES,
    CalibratedEstimator,
    Calibration,
    calibration_config,
    resumed_estimator,
)
from agentloom.engine._clock import iso_utc
from agentloom.engine._compaction import (
    BudgetCompactionPolicy,
    CompactionOutcome,
    CompactionPolicy,
    CompactionRequest,
)
from agentloom.engine._compaction_versions import (
    compaction_binding,
    compaction_named,
    compaction_of,
)
from agentloom.engine._context import (
    ContextBinding,
    ContextManager,
    ContextOptions,
    JournalContextManager,
    PreparedContext,
)
from agentloom.engine._engine import (
    NOT_RUN,
    Checkpoint,
    Engine,
    EngineConfig,
    EngineHooks,
    ExecutionLimits,
    RunOutcome,
    WindowLearned,
    create_engine,
)
from agentloom.engine._errors import (
    ConfigurationError,
    EngineError,
    GatewayError,
    LeaseLostError,
    ToolCancelled,
    ToolError,
)
from agentloom.engine._estimators import (
    ESTIMATORS,
    DeepSeekEstimator,
    O200kEstimator,
    estimator_named,
)
from agentloom.engine._frame import InstanceFrame, ManagedContext, iter_frame_records
from agentloom.engine._gate import PayloadRules, check_payload, sent_request
from agentloom.engine._gateway import (
    CallStream,
    LocalDemoGateway,
    ModelGateway,
    ModelRequest,
    ModelResponse,
    with_passed_back_reasoning,
    without_reasoning,
)
from agentloom.engine._large import LargeRecords, history_judge
from agentloom.engine._measure import (
    InputCheck,
    QuestionRoom,
    check_input,
    measure_context,
    question_room,
)
from agentloom.engine._policy import (
    DEFAULT_POLICY,
    ContextPolicy,
    LegacyCharPolicy,
    TriggerPolicy,
    load_policy,
)
from agentloom.engine._projection import (
    IMPORTED_PREFIX,
    ExcerptJudge,
    ImportedHistory,
    JournalRecord,
    ProjectedHistory,
    ProjectionPoint,
    ReusableView,
    block_excerpts,
    block_masks,
    inherited_plan,
    inherited_plan_set,
    is_run_note,
    project_history,
)
from agentloom.engine._protocol import (
    CANCELLED_RESULT,
    FEEDBACK_PREFIX,
    HANDOFF_MARK,
    INTERRUPTED_RESULT,
    REASONING_KEY,
    RUN_NOTE_PREFIX,
    TOOL_RESULT_VIEW_CHARS,
    UNKNOWN_RESULT,
    message_text,
)
from agentloom.engine._ranges import as_ranges, union_ranges
from agentloom.engine._records import (
    MAIN_INSTANCE,
    USER_INPUT_KEY,
    Record,
    legacy_key,
    status_key,
)
from agentloom.engine._redaction import Redactor, StreamRedactor
from agentloom.engine._refs import LARGE_KEYS, Origin, RecordStore, materialize
from agentloom.engine._rendering import rendering_binding, rendering_named, rendering_of
from agentloom.engine._search import (
    MAX_QUERY_CHARS,
    SEARCH_HISTORY,
    Hit,
    SearchQuery,
    rank,
    record_terms,
    searchable_text,
    term_weight,
)
from agentloom.engine._server_count import ServerEstimator, TokenCounter
from agentloom.engine._tools import (
    BUILTIN_TOOL_NAMES,
    DelegateTool,
    ReadRecordTool,
    SubAgent,
    Tool,
    ToolContext,
    ToolOutput,
    builtin_tools,
)
from agentloom.engine._usage import (
    cached_prompt_tokens,
    estimate_error,
    reported_completion_tokens,
    reported_prompt_tokens,
)
from agentloom.engine._watch import CallWatch, RunWatch, WatchedCall, Watcher, WatchHooks

# Grouped by module, in the order of the imports above, rather than sorted as one list.
__all__ = [  # noqa: RUF022
    # _approval
    "WAITING_APPROVAL",
    "Decision",
    # _asking
    "ANSWER_ACTIONS",
    "WAITING_INPUT",
    "Answer",
    "InputReply",
    "InputRequired",
    # _budget
    "JsonBytesEstimator",
    "LearnedLimit",
    "ModelBudget",
    "TokenEstimator",
    "estimator_from_binding",
    # _calibration
    "DEFAULT_SAMPLES",
    "CalibratedEstimator",
    "Calibration",
    "calibration_config",
    "resumed_estimator",
    # _clock
    "iso_utc",
    # _compaction
    "BudgetCompactionPolicy",
    "CompactionOutcome",
    "CompactionPolicy",
    "CompactionRequest",
    # _context
    "ContextBinding",
    "ContextManager",
    "ContextOptions",
    "JournalContextManager",
    "PreparedContext",
    # _engine
    "Checkpoint",
    "Engine",
    "EngineConfig",
    "EngineHooks",
    "ExecutionLimits",
    "NOT_RUN",
    "RunOutcome",
    "WindowLearned",
    "create_engine",
    # _errors
    "ConfigurationError",
    "EngineError",
    "GatewayError",
    "LeaseLostError",
    "ToolCancelled",
    "ToolError",
    # _estimators
    "ESTIMATORS",
    "DeepSeekEstimator",
    "O200kEstimator",
    "estimator_named",
    # _frame
    "InstanceFrame",
    "ManagedContext",
    "iter_frame_records",
    # _gate
    "PayloadRules",
    "check_payload",
    "sent_request",
    # _gateway
    "CallStream",
    "LocalDemoGateway",
    "ModelGateway",
    "ModelRequest",
    "ModelResponse",
    "with_passed_back_reasoning",
    "without_reasoning",
    # _large
    "LargeRecords",
    "history_judge",
    # _measure
    "InputCheck",
    "QuestionRoom",
    "check_input",
    "measure_context",
    "question_room",
    # _policy
    "DEFAULT_POLICY",
    "ContextPolicy",
    "LegacyCharPolicy",
    "TriggerPolicy",
    "load_policy",
    # _projection
    "IMPORTED_PREFIX",
    "ExcerptJudge",
    "ImportedHistory",
    "JournalRecord",
    "ProjectedHistory",
    "ProjectionPoint",
    "ReusableView",
    "block_excerpts",
    "block_masks",
    "inherited_plan",
    "inherited_plan_set",
    "is_run_note",
    "project_history",
    # _protocol
    "CANCELLED_RESULT",
    "FEEDBACK_PREFIX",
    "HANDOFF_MARK",
    "INTERRUPTED_RESULT",
    "REASONING_KEY",
    "RUN_NOTE_PREFIX",
    "TOOL_RESULT_VIEW_CHARS",
    "UNKNOWN_RESULT",
    "message_text",
    # _records
    "MAIN_INSTANCE",
    "USER_INPUT_KEY",
    "Record",
    "legacy_key",
    "status_key",
    # _redaction
    "Redactor",
    "StreamRedactor",
    # _refs
    "LARGE_KEYS",
    "Origin",
    "RecordStore",
    "as_ranges",
    "union_ranges",
    "materialize",
    # _compaction_versions
    "compaction_binding",
    "compaction_named",
    "compaction_of",
    # _rendering
    "rendering_binding",
    "rendering_named",
    "rendering_of",
    # _search
    "MAX_QUERY_CHARS",
    "SEARCH_HISTORY",
    "Hit",
    "SearchQuery",
    "rank",
    "record_terms",
    "searchable_text",
    "term_weight",
    # _server_count
    "ServerEstimator",
    "TokenCounter",
    # _tools
    "BUILTIN_TOOL_NAMES",
    "DelegateTool",
    "ReadRecordTool",
    "SubAgent",
    "Tool",
    "ToolContext",
    "ToolOutput",
    "builtin_tools",
    # _usage
    "cached_prompt_tokens",
    "estimate_error",
    "reported_completion_tokens",
    "reported_prompt_tokens",
    # _watch
    "CallWatch",
    "RunWatch",
    "WatchedCall",
    "Watcher",
    "WatchHooks",
]
