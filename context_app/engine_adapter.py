"""The Django side's adapter to the engine: build an engine for a run of a published version.

Everything the engine needs comes from the frozen snapshot of the AgentVersion, except the API
key and base URL, which are read live from the model connection (so a rotated key works for old
versions). A connection that no longer serves the snapshot's provider and model id fails the run
with a clear error instead of silently running another model.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from agentloom.engine import (
    BUILTIN_TOOL_NAMES,
    ESTIMATORS,
    ContextBinding,
    DelegateTool,
    Engine,
    EngineConfig,
    EngineHooks,
    ExecutionLimits,
    LargeRecords,
    LegacyCharPolicy,
    LocalDemoGateway,
    ModelBudget,
    ModelGateway,
    ModelRequest,
    QuestionRoom,
    ReadRecordTool,
    RecordStore,
    Redactor,
    ServerEstimator,
    SubAgent,
    TokenCounter,
    TokenEstimator,
    TriggerPolicy,
    builtin_tools,
    calibration_config,
    check_input,
    compaction_binding,
    compaction_named,
    create_engine,
    estimator_from_binding,
    estimator_named,
    load_policy,
    question_room,
    rendering_binding,
    rendering_named,
    sent_request,
)
from agentloom.errors import ApplicationError
from agentloom.providers import (
    PriceInForce,
    ServerTokenizer,
    price_in_force,
    probe_tokenizer,
    retirement_of,
)
from context_app.models import AgentVersion
from context_app.services.server_tools import (
    Held,
    NamedUris,
    read_resource_tool,
    server_tools_of,
)
from models_app.models import ModelConnection
from models_app.services.redaction import redaction_secrets


class ConnectionMismatch(ApplicationError):
    """The version's model connection was deleted or now points at another model."""

    status = 409


def builtin_tool_names() -> tuple[str, ...]:
    """Return the names of the tools an agent may be given."""
    return BUILTIN_TOOL_NAMES


def builtin_tool_descriptions() -> dict[str, str]:
    """Return each tool an agent may be given with the description the model reads."""
    tools = builtin_tools()
    return {name: tools[name].description for name in BUILTIN_TOOL_NAMES}


def estimator_binding(name: str) -> dict[str, Any]:
    """Return the binding of estimator `name` (`bytes`, `o200k`, `deepseek`, `server`), frozen
    at publish."""
    return estimator_named(name).binding()


# Short names by module id, as the API and the console show them.
_NAMES = {factory.module_id: name for name, factory in ESTIMATORS.items()}


def estimator_name(module_id: str | None) -> str:
    """Return the short name of the estimator with `module_id` (`bytes` when not known)."""
    return _NAMES.get(module_id or "", "bytes")


class RetiredModel(ApplicationError):
    """The version's model ID was retired by its provider on the endpoint it calls."""

    status = 409


def version_connection(version: AgentVersion) -> ModelConnection | None:
    """Return the connection row `version` was published on (None once it no longer exists).

    A run reads it once, when it starts, and hands it to everything below that would read it
    (`connection=`): its engine, its binding, its secrets and the prices of its calls. A version
    read with its connection (`select_related`) holds that row already when it is the one its
    snapshot names: no statement then.
    """
    connection_id = (version.snapshot.get("budget") or {}).get("connection_id")
    loaded = AgentVersion._meta.get_field("model_connection")
    if (
        connection_id is not None
        and connection_id == version.model_connection_id
        and loaded.is_cached(version)
    ):
        return version.model_connection
    return _connection_row(version.snapshot)


def connection_now(version: AgentVersion) -> ModelConnection | None:
    """Return the connection row `version` was published on as it is now (one statement, never
    a row the version holds from earlier: a key rotated since must be redacted), for a caller
    that hands it to several readers (`connection=`); None once it no longer exists."""
    return _connection_row(version.snapshot)


def _connection_row(snapshot: dict[str, Any]) -> ModelConnection | None:
    """Return the snapshot's connection row, or None (read by its key: no ordering to compile)."""
    connection_id = (snapshot.get("budget") or {}).get("connection_id")
    if connection_id is None:
        return None
    try:
        return ModelConnection.objects.get(pk=connection_id)
    except ModelConnection.DoesNotExist:
        return None


def _read(snapshot: dict[str, Any], connection: ModelConnection | bool | None) -> Any:
    """Return `connection` when the caller read it already, else the snapshot's connection row."""
    if connection is not False:
        return connection
    return _connection_row(snapshot)


def _live_connection(
    snapshot: dict[str, Any], connection: ModelConnection | bool | None = False
) -> ModelConnection:
    budget = snapshot["budget"]
    connection = _read(snapshot, connection)
    if connection is None:
        raise ConnectionMismatch("The model connection of this agent version no longer exists.")
    if (connection.provider, connection.model_id) != (budget["provider"], budget["model_id"]):
        raise ConnectionMismatch(
            f"The model connection now serves {connection.provider}:{connection.model_id}, but "
            f"this version was published for {budget['provider']}:{budget['model_id']}. "
            "Publish a new version to use the new model."
        )
    retirement = retirement_of(connection.provider, connection.base_url, connection.model_id)
    if retirement is not None:
        raise RetiredModel(
            f"{retirement.message(connection.get_provider_display())} This version can no longer "
            "run: point a connection at the replacement, publish a new version with it and "
            "start a new session."
        )
    return connection


def price_for(
    version: AgentVersion,
    at: datetime.datetime | None = None,
    *,
    connection: ModelConnection | bool | None = False,
) -> PriceInForce | None:
    """Return the prices of a call of `version` that started at `at` (default now), or None.

    Read from the manifest for the version's exact model on the live connection's official
    endpoint, else from the prices an operator entered on the connection (`connection`: the
    row as the caller read it, e.g. when its run started).
    """
    budget = version.snapshot.get("budget") or {}
    connection = _read(version.snapshot, connection)
    if connection is None or connection.model_id != budget.get("model_id"):
        return None
    return price_in_force(
        connection.provider,
        connection.base_url,
        connection.model_id,
        at=at or datetime.datetime.now(datetime.UTC),
        manual=connection.prices,
    )


# Tests and replays substitute the gateway for a version here.
GatewayFactory = Callable[[AgentVersion, ModelConnection], ModelGateway]


def _default_gateway(version: AgentVersion, connection: ModelConnection) -> ModelGateway:
    if connection.provider == ModelConnection.Provider.LOCAL:
        return LocalDemoGateway()
    from agentloom.providers import CallOptions, ModelEndpoint, OutputLimits, gateway_for_provider

    # As frozen at publish. None (learned, and versions published before the setting): the
    # rule the connection learned since, so each run does not learn it again from a refusal;
    # DeepSeek's official endpoint keeps its own rule.
    reasoning = version.snapshot.get("reasoning")
    if reasoning is None and connection.provider != ModelConnection.Provider.DEEPSEEK:
        reasoning = connection.learned_reasoning or None
    options: dict[str, Any] = {"reasoning": reasoning}
    if connection.provider == ModelConnection.Provider.OLLAMA:
        options["num_ctx"] = connection.num_ctx
    if connection.provider == ModelConnection.Provider.DEEPSEEK:
        # As frozen at publish: a later change of the connection reaches new versions only.
        thinking = version.snapshot.get("thinking") or {}
        options["thinking"] = thinking.get("thinking")
        options["reasoning_effort"] = thinking.get("reasoning_effort")
    budget = version.snapshot["budget"]
    return gateway_for_provider(
        connection.provider,
        ModelEndpoint(connection.base_url, connection.api_key, budget["model_id"]),
        output=OutputLimits(budget["max_output_tokens"], connection.max_output_cap),
        calls=CallOptions(allow_private_hosts=settings.ALLOW_PRIVATE_MODEL_HOSTS),
        **options,
    )


_gateway_factory: GatewayFactory = _default_gateway


def reasoning_rule(connection: ModelConnection) -> str | None:
    """Return the reasoning rule a version published now freezes: a person's setting, else a
    rule runs learned from a refusal, else None (the gateway's own default: DeepSeek's official
    endpoint its tool-span rule, a compatible server `learned`, OpenAI `never`)."""
    return connection.reasoning_passback or connection.learned_reasoning or None


def set_gateway_factory(factory: GatewayFactory | None) -> None:
    """Replace how gateways are made (None restores the real providers)."""
    global _gateway_factory
    _gateway_factory = factory or _default_gateway


def secrets_for(
    version: AgentVersion, *, connection: ModelConnection | bool | None = False
) -> list[str]:
    """Return the credentials to redact from everything `version`'s runs write.

    They are its connection's key and previous keys, then the header values of its space's tool
    servers (`redaction_secrets`); none once the connection no longer exists.
    """
    connection = _read(version.snapshot, connection)
    return redaction_secrets(connection) if connection else []


def redactor_for(
    version: AgentVersion, *, connection: ModelConnection | bool | None = False
) -> Redactor:
    """Return what removes `version`'s known credentials from anything about to be written.

    Every path that writes a question, supplement or record redacts with it first, so a key
    pasted into a question never reaches the journal, a run row or a checkpoint; so are the
    connection's previous keys and the tool servers' headers (`secrets_for`). `connection`:
    the row the caller read as it is now (`connection_now`), else it is read here.
    """
    return Redactor(secrets_for(version, connection=connection))


def gateway_for(version: AgentVersion) -> ModelGateway:
    """Return the gateway for `version` (its credentials to redact: `secrets_for`)."""
    return _gateway_factory(version, _live_connection(version.snapshot))


def sent_messages(
    version: AgentVersion, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Return what an action request of `messages` and `tools` puts on the wire for `version`.

    The gateway decides (`ModelGateway.payload`: DeepSeek passes reasoning back, other providers
    never send it); without a usable connection, the view itself.
    """
    try:
        gateway = gateway_for(version)
    except ConnectionMismatch:
        return messages, tools
    budget = version.snapshot["budget"]
    request = ModelRequest(
        purpose="action",
        messages=messages,
        tools=tools,
        max_output_tokens=budget["max_output_tokens"],
    )
    return sent_request(gateway.payload(request))


def run_measures(
    snapshot: dict[str, Any],
    binding: dict[str, Any] | None = None,
    *,
    learned: bool = True,
    counter: TokenCounter | None = None,
    connection: ModelConnection | bool | None = False,
) -> tuple[TriggerPolicy, ModelBudget, TokenEstimator]:
    """Return the policy, budget and estimator a run measures its context with.

    What a checkpoint's `binding` names wins (a run keeps what it started with); anything it
    does not name comes from the version's frozen snapshot, whose window a new run takes down
    to the window its connection learned from the server (`learned`), never up. A snapshot
    without a context policy is a legacy version and gets the character threshold. `counter`
    is the server's tokenizer a `server` estimator counts with (none: it never calls out).
    """
    binding = binding or {}
    if "policy" in binding:
        policy = load_policy(binding["policy"])
    elif snapshot.get("context_policy") is None:
        policy = LegacyCharPolicy(context_chars=settings.LEGACY_CONTEXT_CHARS)
    else:
        policy = load_policy(snapshot["context_policy"])
    if "budget" in binding:
        budget = ModelBudget.from_dict(binding["budget"])
    else:
        budget = ModelBudget.from_dict(snapshot["budget"])
        window = learned_window(snapshot, connection=connection) if learned else None
        if window is not None:
            budget = budget.within(window)
    estimator = estimator_from_binding(
        binding.get("estimator") or snapshot.get("estimator"), counter=counter
    )
    remember = getattr(estimator, "remember", None)
    if remember is not None:
        # What the server counted at publish (the system prompt and the tools): measured so
        # without asking it, at the door and on the pages.
        remember((snapshot.get("server_tokenizer") or {}).get("counts"))
    return policy, budget, estimator


def learned_window(
    snapshot: dict[str, Any], *, connection: ModelConnection | bool | None = False
) -> int | None:
    """Return the window the snapshot's connection learned from its server, if it still serves
    the snapshot's model (None: nothing learned, or another model now)."""
    budget = snapshot.get("budget") or {}
    if connection is not False:
        row = (
            (connection.provider, connection.model_id, connection.learned_window)
            if connection is not None
            else None
        )
    else:
        row = (
            ModelConnection.objects.filter(pk=budget.get("connection_id"))
            .values_list("provider", "model_id", "learned_window")
            .first()
        )
    if row is None or (row[0], row[1]) != (budget.get("provider"), budget.get("model_id")):
        return None
    return row[2]


def measure_unit(snapshot: dict[str, Any]) -> str:
    """Return the unit a version's requests are measured in, as a message names it."""
    name = estimator_name((snapshot.get("estimator") or {}).get("module_id"))
    if snapshot.get("context_policy") is None:
        return "characters"
    return {
        "bytes": "UTF-8 bytes",
        "server": "tokens of the server's own tokenizer",
    }.get(name, f"{name} tokens")


def server_counter(snapshot: dict[str, Any], connection: ModelConnection) -> TokenCounter | None:
    """Return the server's tokenizer a `server` version counts with (None for other
    estimators): the route frozen at publish, on the connection's own origin."""
    name = estimator_name((snapshot.get("estimator") or {}).get("module_id"))
    route = (snapshot.get("server_tokenizer") or {}).get("route")
    if name != "server" or not route:
        return None
    return ServerTokenizer(_endpoint(connection, snapshot), route, calls=_calls())


def tokenizer_route(connection: ModelConnection) -> str | None:
    """Ask the connection's server which tokenizer route works (None: it does not tokenize)."""
    return probe_tokenizer(_endpoint(connection), calls=_calls())


def _endpoint(connection: ModelConnection, snapshot: dict[str, Any] | None = None):
    from agentloom.providers import ModelEndpoint

    model_id = ((snapshot or {}).get("budget") or {}).get("model_id") or connection.model_id
    return ModelEndpoint(connection.base_url, connection.api_key or None, model_id)


def _calls():
    from agentloom.providers import CallOptions

    return CallOptions(allow_private_hosts=settings.ALLOW_PRIVATE_MODEL_HOSTS)


def offered_tools(snapshot: dict[str, Any], *, reading: bool = True) -> list[dict[str, Any]]:
    """Return the tool schemas the main instance of a run of `snapshot` may be offered.

    `read_record` is offered to versions with a large-record policy (`reading`: from the first
    request since rendering 4, before only while the view held a reference); by default it is
    counted, so limits and the room for a question keep room for it.
    """
    available = builtin_tools()
    tools = [available[name] for name in snapshot.get("tools") or [] if name in available]
    tools.extend(server_tools_of(snapshot))
    reader = read_resource_tool(snapshot)
    if reader is not None:
        tools.append(reader)
    for sub in snapshot.get("sub_agents") or []:
        # Only the schema is needed here; the runner or reader is never called.
        tools.append(DelegateTool(SubAgent.from_dict(sub), lambda _sub, _task: ""))
    if reading and snapshot.get("large_records") is not None:
        tools.append(ReadRecordTool(lambda _ref, _offset, _limit: ""))
    return [tool.schema() for tool in tools]


@dataclass(frozen=True)
class DoorCheck:
    """A question or supplement measured at the door: its size and limit, and their unit.

    `fallback` says how a `server` version measured it when its tokenizer did not answer
    (`"bytes"` or `"last_exact_plus_bytes"`: an upper bound), None otherwise.
    """

    size: int
    limit: int
    unit: str
    fallback: str | None = None

    @property
    def fits(self) -> bool:
        return self.size <= self.limit

    def described(self) -> str:
        """Return the size and limit as a refusal names them, in their unit."""
        return f"{self.size:,} {self.unit}, above the limit of {self.limit:,} {self.unit}"

    def fallback_note(self) -> str:
        """Return what a refusal adds when the server's tokenizer did not answer ("" else)."""
        if self.fallback is None:
            return ""
        return (
            " The server's tokenizer did not answer, so the text was counted in UTF-8 bytes "
            "(never fewer than its tokens)."
        )


def _door_counter(snapshot: dict[str, Any]) -> TokenCounter | None:
    """Return the server's tokenizer the door counts a `server` version's input with, as a run
    counts it (None for other estimators, or when the connection no longer serves the model)."""
    if estimator_name((snapshot.get("estimator") or {}).get("module_id")) != "server":
        return None
    try:
        connection = _live_connection(snapshot)
    except (ConnectionMismatch, RetiredModel):
        return None
    return server_counter(snapshot, connection)


PINNED_HEADER = "[pinned instructions, kept as written]"
# The most a session pins (characters); the room for a question decides within it.
PINNED_MAX_CHARS = 8_000


def pinned_prompt(snapshot: dict[str, Any], pinned: str) -> str:
    """Return the system prompt a run of `snapshot` starts with: the version's, then the
    session's pinned instructions word for word. The system head is never summarised
    (compaction pins it), so pinned text is in every view; it counts in the room for a question
    like the prompt does."""
    system_prompt = snapshot.get("system_prompt", "")
    return f"{system_prompt}\n\n{PINNED_HEADER}\n{pinned}" if pinned else system_prompt


def pinned_room(version: AgentVersion, pinned: str) -> QuestionRoom:
    """Return the room for a question `version` leaves with `pinned` after its system prompt."""
    snapshot = version.snapshot
    return snapshot_question_room({**snapshot, "system_prompt": pinned_prompt(snapshot, pinned)})


def input_check(
    version: AgentVersion,
    text: str,
    pinned: str = "",
    *,
    connection: ModelConnection | bool | None = False,
) -> DoorCheck:
    """Return how large `text` is as a question or supplement of `version`, and its limit.

    Both are in the unit of the hard check of its runs (`measure_unit`). A `server` version
    counts `text` with the server's tokenizer (one call), the system prompt and the tools with
    the counts kept at publish; when the tokenizer does not answer, `text` is counted in UTF-8
    bytes, never fewer than its tokens. An empty text asks no server (the limit needs none).
    `pinned`: the session's pinned instructions, which follow the system prompt. `connection`:
    the row the caller read (`connection_now`), whose learned window applies; else it is read
    here.
    """
    snapshot = version.snapshot
    counter = _door_counter(snapshot) if text else None
    policy, budget, estimator = run_measures(snapshot, counter=counter, connection=connection)
    check = check_input(
        policy=policy,
        budget=budget,
        estimator=estimator,
        system_prompt=pinned_prompt(snapshot, pinned),
        tools=offered_tools(snapshot),
        text=text,
    )
    size_fallback = None
    if isinstance(estimator, ServerEstimator) and text:
        # How the text itself was measured (cached: no second call); the limit is measured
        # after it, from the counts kept at publish.
        size_fallback = estimator.counts([{"role": "user", "content": text}], [])["fallback"]
    return DoorCheck(check.size, check.limit, measure_unit(snapshot), size_fallback)


def snapshot_question_room(
    snapshot: dict[str, Any], *, counter: TokenCounter | None = None
) -> QuestionRoom:
    """Return the room a version of `snapshot` leaves for a question, with its figures.

    It is counted in the unit the hard check of its runs uses (`measure_unit`): with a `server`
    estimator, `counter` is the server's tokenizer (at publish), and what it counted is kept in
    `snapshot["server_tokenizer"]["counts"]` so that later measures need no server; without a
    counter, those counts, and for anything not counted the bound the estimator falls back to.
    """
    policy, budget, estimator = run_measures(snapshot, counter=counter)
    large_records = LargeRecords.from_config(snapshot.get("large_records"))
    room = question_room(
        policy=policy,
        budget=budget,
        estimator=estimator,
        system_prompt=snapshot.get("system_prompt", ""),
        tools=offered_tools(snapshot),
        large_record_limit=large_records.limit(budget) if large_records is not None else 0,
    )
    recorded = getattr(estimator, "recorded", None)
    if counter is not None and recorded is not None:
        snapshot.setdefault("server_tokenizer", {})["counts"] = recorded()
    return room


def version_binding(
    version: AgentVersion,
    *,
    rendering: int | None = None,
    compaction: int | None = None,
    start: dict[str, Any] | None = None,
    connection: ModelConnection | bool | None = False,
) -> dict[str, Any]:
    """Return the binding (policy, budget, estimator) that runs of `version` are measured with.

    It equals the `binding` the engine writes into each checkpoint, so reusable views saved by
    one run can be matched against the binding of the next. New runs use the current rendering
    and compaction versions and the window learned so far; `rendering` and `compaction` name
    other versions and `start` the budget a past run started with (a replay of it);
    `connection` is the row a run read as it started.
    """
    policy, budget, estimator = run_measures(
        version.snapshot, start, learned=start is None, connection=connection
    )
    binding = {
        "policy": policy.bound(),
        "budget": budget.to_dict(),
        "estimator": estimator.binding(),
    }
    calibration = calibration_config(version.snapshot.get("calibration"))
    if calibration is not None:
        binding["calibration"] = calibration
    large_records = LargeRecords.from_config(version.snapshot.get("large_records"))
    if large_records is not None:
        binding["large_records"] = large_records.to_dict()
    binding.update(rendering_binding(rendering_named(rendering)))
    binding.update(compaction_binding(compaction_named(compaction)))
    return binding


def build_engine(
    version: AgentVersion,
    hooks: EngineHooks,
    *,
    record_store: RecordStore | None = None,
    held: Held | None = None,
    connection: ModelConnection | bool | None = False,
    named_uris: NamedUris | None = None,
    cache_key: str | None = None,
    member_id: int | None = None,
) -> Engine:
    """Return an engine bound to `version`'s frozen snapshot, with the run's `hooks` plugged in.

    `record_store` is where the run's by-reference checkpoints find the records they refer to;
    `held` wraps the database reads its tools make during the run, as it wraps the hooks;
    `connection` is the version's connection row as the run read it (`version_connection`);
    `named_uris` finds the resource URIs a server's results named in the run's session.
    `cache_key` goes with each model call (the session's: `EngineConfig.cache_key`);
    `member_id` is the session's creator, whose OAuth connections member-identity servers use.
    """
    snapshot = version.snapshot
    connection = _live_connection(snapshot, connection)
    gateway = _gateway_factory(version, connection)
    policy, budget, estimator = run_measures(
        snapshot, counter=server_counter(snapshot, connection), connection=connection
    )
    reader = read_resource_tool(snapshot, named=named_uris, held=held, member_id=member_id)
    return create_engine(
        gateway,
        [
            *(name for name in snapshot.get("tools", []) if name in BUILTIN_TOOL_NAMES),
            *server_tools_of(snapshot, held=held, member_id=member_id),
            *([reader] if reader is not None else []),
        ],
        ContextBinding(policy, budget, estimator, large_records=snapshot.get("large_records")),
        hooks=hooks,
        config=EngineConfig(
            limits=ExecutionLimits(max_model_calls=settings.RUN_MAX_MODEL_CALLS),
            secrets=tuple(secrets_for(version, connection=connection)),
            sub_agents=tuple(snapshot.get("sub_agents", [])),
            verify_completion=bool(snapshot.get("verify_completion")),
            record_store=record_store,
            calibration=snapshot.get("calibration"),
            cache_key=cache_key,
        ),
    )
