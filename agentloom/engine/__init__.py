"""The context engine: plain Python, no Django.

Journal records, the checkpoint frame, budget and policy, compaction, projection of history,
tools, the agent loop and the model gateways. The Django side builds an engine per run with
`create_engine`, passes it projected history and persists what it hands back.

The engine's public names are the ones listed in `__all__` below, and callers import them from
`agentloom.engine`; the modules with a leading underscore are internal and may change shape
freely. Test doubles (a scripted gateway, an in-memory journal, generated history trials) live
in `agentloom.engine.testing`, outside this surface.
"""

from agentloom.engine._approval import (
    WAITING_APPROVAL,
    Decision,
    denied_result,
)
from agentloom.engine._budget import (
    DEFAULT_ESTIMATOR_ID,
    JsonBytesEstimator,
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
from agentloom.engine._clock import (
    Clock,
    iso_utc,
    system_clock,
)
from agentloom.engine._compaction import (
    BudgetCompactionPolicy,
    CompactionOutcome,
    CompactionPolicy,
    CompactionRequest,
)
from agentloom.engine._context import (
    ContextManager,
    JournalContextManager,
    PreparedContext,
)
from agentloom.engine._engine import (
    DEFAULT_MAX_MODEL_CALLS,
    Checkpoint,
    Engine,
    EngineConfig,
    EngineHooks,
    ExecutionLimits,
    ModelCallRecord,
    RunOutcome,
    create_engine,
)
from agentloom.engine._errors import (
    ConfigurationError,
    ContextBudgetExceeded,
    EngineError,
    FrameError,
    GatewayError,
    LeaseLostError,
    ModelCallLimitReached,
    ToolCancelled,
    ToolError,
)
from agentloom.engine._estimators import (
    ESTIMATOR_CLASSES,
    ESTIMATORS,
    DeepSeekEstimator,
    O200kEstimator,
    TokenizerEstimator,
    estimator_named,
)
from agentloom.engine._frame import (
    FRAME_FORMAT,
    ExecutionState,
    InstanceFrame,
    ManagedContext,
    iter_frame_records,
    reusable_views,
)
from agentloom.engine._gateway import (
    PURPOSES,
    LocalDemoGateway,
    ModelGateway,
    ModelRequest,
    ModelResponse,
    text_response,
    tool_call_response,
)
from agentloom.engine._large import (
    LargeRecords,
    history_judge,
)
from agentloom.engine._measure import (
    ContextMeasure,
    InputCheck,
    check_input,
    measure_context,
)
from agentloom.engine._policy import (
    DEFAULT_POLICY,
    LEGACY_CONTEXT_CHARS,
    ContextPolicy,
    LegacyCharPolicy,
    TriggerPolicy,
    load_policy,
)
from agentloom.engine._projection import (
    ExcerptJudge,
    JournalRecord,
    ProjectedHistory,
    ReusableView,
    block_excerpts,
    is_run_note,
    project_history,
)
from agentloom.engine._protocol import (
    CANCELLED_RESULT,
    FEEDBACK_PREFIX,
    HANDOFF_MARK,
    INTERRUPTED_RESULT,
    TOOL_RESULT_VIEW_CHARS,
    UNKNOWN_RESULT,
    message_text,
    protocol_problems,
)
from agentloom.engine._records import (
    KINDS,
    MAIN_INSTANCE,
    USER_INPUT_KEY,
    Counters,
    Record,
    status_key,
)
from agentloom.engine._redaction import (
    Redactor,
)
from agentloom.engine._refs import (
    LARGE_KEYS,
    Origin,
    RecordStore,
    as_ranges,
    materialize,
)
from agentloom.engine._tools import (
    BUILTIN_TOOL_NAMES,
    DelegateTool,
    ReadRecordTool,
    SubAgent,
    Tool,
    ToolContext,
    ToolOutput,
    Toolset,
    build_toolset,
    builtin_tools,
)
from agentloom.engine._usage import (
    cached_prompt_tokens,
    estimate_error,
    reported_completion_tokens,
    reported_prompt_tokens,
)

__all__ = [
    "BUILTIN_TOOL_NAMES",
    "CANCELLED_RESULT",
    "DEFAULT_ESTIMATOR_ID",
    "DEFAULT_MAX_MODEL_CALLS",
    "DEFAULT_POLICY",
    "DEFAULT_SAMPLES",
    "ESTIMATORS",
    "ESTIMATOR_CLASSES",
    "FEEDBACK_PREFIX",
    "FRAME_FORMAT",
    "HANDOFF_MARK",
    "INTERRUPTED_RESULT",
    "KINDS",
    "LARGE_KEYS",
    "LEGACY_CONTEXT_CHARS",
    "MAIN_INSTANCE",
    "PURPOSES",
    "TOOL_RESULT_VIEW_CHARS",
    "UNKNOWN_RESULT",
    "USER_INPUT_KEY",
    "WAITING_APPROVAL",
    "BudgetCompactionPolicy",
    "CalibratedEstimator",
    "Calibration",
    "Checkpoint",
    "Clock",
    "CompactionOutcome",
    "CompactionPolicy",
    "CompactionRequest",
    "ConfigurationError",
    "ContextBudgetExceeded",
    "ContextManager",
    "ContextMeasure",
    "ContextPolicy",
    "Counters",
    "Decision",
    "DeepSeekEstimator",
    "DelegateTool",
    "Engine",
    "EngineConfig",
    "EngineError",
    "EngineHooks",
    "ExcerptJudge",
    "ExecutionLimits",
    "ExecutionState",
    "FrameError",
    "GatewayError",
    "InputCheck",
    "InstanceFrame",
    "JournalContextManager",
    "JournalRecord",
    "JsonBytesEstimator",
    "LargeRecords",
    "LeaseLostError",
    "LegacyCharPolicy",
    "LocalDemoGateway",
    "ManagedContext",
    "ModelBudget",
    "ModelCallLimitReached",
    "ModelCallRecord",
    "ModelGateway",
    "ModelRequest",
    "ModelResponse",
    "O200kEstimator",
    "Origin",
    "PreparedContext",
    "ProjectedHistory",
    "ReadRecordTool",
    "Record",
    "RecordStore",
    "Redactor",
    "ReusableView",
    "RunOutcome",
    "SubAgent",
    "TokenEstimator",
    "TokenizerEstimator",
    "Tool",
    "ToolCancelled",
    "ToolContext",
    "ToolError",
    "ToolOutput",
    "Toolset",
    "TriggerPolicy",
    "as_ranges",
    "block_excerpts",
    "build_toolset",
    "builtin_tools",
    "cached_prompt_tokens",
    "calibration_config",
    "check_input",
    "create_engine",
    "denied_result",
    "estimate_error",
    "estimator_from_binding",
    "estimator_named",
    "history_judge",
    "is_run_note",
    "iso_utc",
    "iter_frame_records",
    "load_policy",
    "materialize",
    "measure_context",
    "message_text",
    "project_history",
    "protocol_problems",
    "reported_completion_tokens",
    "reported_prompt_tokens",
    "resumed_estimator",
    "reusable_views",
    "status_key",
    "system_clock",
    "text_response",
    "tool_call_response",
]
