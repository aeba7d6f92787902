"""The context engine: plain Python, no Django.

Journal records, the checkpoint frame, budget and policy, compaction, projection of history,
tools, the agent loop and the model gateways. The Django side builds an engine per run with
`create_engine`, passes it projected history and persists what it hands back.
"""

from agentloom.engine.budget import (
    DEFAULT_ESTIMATOR_ID,
    JsonBytesEstimator,
    ModelBudget,
    TokenEstimator,
    estimator_from_binding,
)
from agentloom.engine.compaction import (
    BudgetCompactionPolicy,
    CompactionOutcome,
    CompactionPolicy,
    CompactionRequest,
)
from agentloom.engine.context import ContextManager, JournalContextManager, PreparedContext
from agentloom.engine.engine import (
    DEFAULT_MAX_MODEL_CALLS,
    Checkpoint,
    Engine,
    EngineConfig,
    ExecutionLimits,
    ModelCallRecord,
    RunOutcome,
    create_engine,
)
from agentloom.engine.errors import (
    ConfigurationError,
    ContextBudgetExceeded,
    EngineError,
    FrameError,
    GatewayError,
    ModelCallLimitReached,
    ToolError,
)
from agentloom.engine.estimators import (
    ESTIMATOR_CLASSES,
    ESTIMATORS,
    DeepSeekEstimator,
    O200kEstimator,
    TokenizerEstimator,
    estimator_named,
)
from agentloom.engine.frame import (
    FRAME_FORMAT,
    ExecutionState,
    InstanceFrame,
    ManagedContext,
    iter_frame_records,
    reusable_views,
)
from agentloom.engine.gateway import (
    PURPOSES,
    LocalDemoGateway,
    ModelGateway,
    ModelRequest,
    ModelResponse,
    ScriptedGateway,
    text_response,
    tool_call_response,
)
from agentloom.engine.policy import (
    DEFAULT_POLICY,
    LEGACY_CONTEXT_CHARS,
    ContextPolicy,
    LegacyCharPolicy,
    TriggerPolicy,
    load_policy,
)
from agentloom.engine.projection import (
    JournalRecord,
    ProjectedHistory,
    ReusableView,
    project_history,
)
from agentloom.engine.protocol import TOOL_RESULT_VIEW_CHARS, protocol_problems
from agentloom.engine.records import KINDS, MAIN_INSTANCE, Counters, Record
from agentloom.engine.refs import RecordStore, materialize
from agentloom.engine.tools import (
    BUILTIN_TOOL_NAMES,
    SubAgent,
    Tool,
    Toolset,
    build_toolset,
    builtin_tools,
)

__all__ = [
    "BUILTIN_TOOL_NAMES",
    "DEFAULT_ESTIMATOR_ID",
    "DEFAULT_MAX_MODEL_CALLS",
    "DEFAULT_POLICY",
    "ESTIMATORS",
    "ESTIMATOR_CLASSES",
    "FRAME_FORMAT",
    "KINDS",
    "LEGACY_CONTEXT_CHARS",
    "MAIN_INSTANCE",
    "PURPOSES",
    "TOOL_RESULT_VIEW_CHARS",
    "BudgetCompactionPolicy",
    "Checkpoint",
    "CompactionOutcome",
    "CompactionPolicy",
    "CompactionRequest",
    "ConfigurationError",
    "ContextBudgetExceeded",
    "ContextManager",
    "ContextPolicy",
    "Counters",
    "DeepSeekEstimator",
    "Engine",
    "EngineConfig",
    "EngineError",
    "ExecutionLimits",
    "ExecutionState",
    "FrameError",
    "GatewayError",
    "InstanceFrame",
    "JournalContextManager",
    "JournalRecord",
    "JsonBytesEstimator",
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
    "PreparedContext",
    "ProjectedHistory",
    "Record",
    "RecordStore",
    "ReusableView",
    "RunOutcome",
    "ScriptedGateway",
    "SubAgent",
    "TokenEstimator",
    "TokenizerEstimator",
    "Tool",
    "ToolError",
    "Toolset",
    "TriggerPolicy",
    "build_toolset",
    "builtin_tools",
    "create_engine",
    "estimator_from_binding",
    "estimator_named",
    "iter_frame_records",
    "load_policy",
    "materialize",
    "project_history",
    "protocol_problems",
    "reusable_views",
    "text_response",
    "tool_call_response",
]
