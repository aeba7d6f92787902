"""Tools the agent may call: the interface, the built-ins, sub-agent delegation and toolsets.

A version offers and executes only its own tools. Arguments arrive as JSON text from the model;
they are parsed and checked against the tool's JSON schema before the tool runs, and every
failure becomes a tool message plus feedback, never an exception out of the engine.

A tool runs with a `ToolContext`: a cancellation signal (set when the run is cancelled or loses
its lease while the tool runs; tools that wait stop on it) and the instance's plan setter.
`limit_seconds` is the longest a call may run: the lease is never renewed past it.

A tool returns text, or a `ToolOutput` when it has more than the model sees: the journal keeps
its `detail` whole with the record (the view shows only the text) and `error` makes it a failed
call (an error result plus feedback) whose result is still kept.
"""

from __future__ import annotations

import abc
import ast
import math
import operator
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentloom.engine._clock import Clock, iso_utc, system_clock
from agentloom.engine._errors import ConfigurationError, ToolCancelled, ToolError
from agentloom.engine._large import READ_MAX_CHARS, READ_RECORD
from agentloom.engine._search import (
    MAX_HITS,
    MAX_QUERY_CHARS,
    SEARCH_HISTORY,
    SEARCHABLE_KINDS,
    SearchQuery,
)

__all__ = [
    "BUILTIN_TOOL_NAMES",
    "DEFAULT_TOOL_SECONDS",
    "DELEGATE_PREFIX",
    "PLAN_STATUSES",
    "PLAN_UPDATED",
    "DelegateTool",
    "ReadRecordTool",
    "SearchHistoryTool",
    "SubAgent",
    "Tool",
    "ToolContext",
    "ToolOutput",
    "Toolset",
    "UpdatePlanTool",
    "argument_errors",
    "build_toolset",
    "builtin_tools",
    "evaluate_arithmetic",
    "plan_set_by",
    "render_plan",
]

DELEGATE_PREFIX = "delegate_"
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


# The longest a tool call may run unless the tool says otherwise (see `Tool.limit_seconds`).
DEFAULT_TOOL_SECONDS = 60.0


@dataclass
class ToolContext:
    """What a running tool may use beyond its arguments.

    `cancelled` is set when the run is cancelled (or loses its lease) while the tool runs: a
    tool that waits stops on it and raises `ToolCancelled`. `set_plan` replaces the calling
    instance's plan (it raises `ToolError` when the plan is too large). `search` answers a
    `search_history` query over the records the calling instance may read.

    A person's answers to a tool server (see `_asking`): `reply` is what a call that waited
    sends again (the answers and the server's request state); `ask(server, questions, seconds)`
    asks the person while the call is open and returns the answers by question key (as the
    server reads them), or None when no one answered within `seconds`. Without `ask` no person
    can answer this call. `call_id` names the call (empty outside a run's tool group).
    """

    cancelled: threading.Event = field(default_factory=threading.Event)
    set_plan: Callable[[str], None] | None = None
    search: Callable[[SearchQuery], str] | None = None
    reply: Any = None
    call_id: str = ""
    ask: Callable[[str, list[dict[str, Any]], float], Mapping[str, Any] | None] | None = None


@dataclass(frozen=True)
class ToolOutput:
    """A tool's result: `text` for the model, `detail` (JSON) kept whole in the journal only, and
    `error`, a short reason, when the call failed."""

    text: str
    detail: dict[str, Any] | None = None
    error: str | None = None


class Tool(abc.ABC):
    """A function the model may call, described by a JSON schema.

    `needs_approval`: a person decides each call before it runs (see `_approval`).
    """

    name: str
    description: str
    parameters: dict[str, Any]
    needs_approval: bool = False

    @abc.abstractmethod
    def run(self, arguments: dict[str, Any]) -> str | ToolOutput:
        """Return the tool's result as text (or a `ToolOutput`), or raise `ToolError`."""

    def run_in(self, arguments: dict[str, Any], context: ToolContext) -> str | ToolOutput:
        """Run with the cancellation signal and hooks of `context` (tools that can stop early
        or need a hook override this; the rest simply `run`)."""
        return self.run(arguments)

    def limit_seconds(self, arguments: dict[str, Any]) -> float | None:
        """Return the longest this call may run; None when it renews nothing itself."""
        return DEFAULT_TOOL_SECONDS

    def schema(self) -> dict[str, Any]:
        """Return the chat-completions tool definition."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


def _object(properties: dict[str, Any], required: Iterable[str] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
}


def argument_errors(schema: dict[str, Any], value: Any, path: str = "arguments") -> list[str]:
    """Return how `value` breaks `schema` (the subset of JSON Schema tool parameters use)."""
    expected = schema.get("type")
    if expected in _TYPES and not _TYPES[expected](value):
        return [f"{path} must be of type {expected}"]
    errors: list[str] = []
    if isinstance(value, int | float) and not isinstance(value, bool):
        errors.extend(_number_errors(schema, value, path))
    if isinstance(value, str) and "maxLength" in schema and len(value) > schema["maxLength"]:
        errors.append(f"{path} must be at most {schema['maxLength']} characters")
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path} must be one of {', '.join(map(str, schema['enum']))}")
    if isinstance(value, list):
        errors.extend(_array_errors(schema, value, path))
    if isinstance(value, dict):
        errors.extend(_object_errors(schema, value, path))
    return errors


def _number_errors(schema: dict[str, Any], value: int | float, path: str) -> list[str]:
    """Return how a number breaks `schema`: not finite, below `minimum`, above `maximum`."""
    errors: list[str] = []
    if not math.isfinite(value):
        errors.append(f"{path} must be a finite number")
    if "minimum" in schema and value < schema["minimum"]:
        errors.append(f"{path} must be at least {schema['minimum']}")
    if "maximum" in schema and value > schema["maximum"]:
        errors.append(f"{path} must be at most {schema['maximum']}")
    return errors


def _array_errors(schema: dict[str, Any], value: list[Any], path: str) -> list[str]:
    """Return how an array breaks `schema`: its length, then each item against `items`."""
    errors: list[str] = []
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        errors.append(f"{path} must have at most {schema['maxItems']} items")
    if "minItems" in schema and len(value) < schema["minItems"]:
        errors.append(f"{path} must have at least {schema['minItems']} items")
    if isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            errors.extend(argument_errors(schema["items"], item, f"{path}[{index}]"))
    return errors


def _object_errors(schema: dict[str, Any], value: dict[str, Any], path: str) -> list[str]:
    """Return how an object breaks `schema`: missing required, bad or unknown properties."""
    errors: list[str] = []
    properties = schema.get("properties") or {}
    for name in schema.get("required") or []:
        if name not in value:
            errors.append(f"{path}.{name} is required")
    for name, item in value.items():
        if name in properties:
            errors.extend(argument_errors(properties[name], item, f"{path}.{name}"))
        elif schema.get("additionalProperties") is False:
            errors.append(f"{path}.{name} is not a known argument")
    return errors


class EchoTool(Tool):
    name = "echo"
    description = "Return the given text unchanged."
    parameters = _object({"text": {"type": "string"}}, ["text"])

    def run(self, arguments: dict[str, Any]) -> str:
        return arguments["text"]


class CurrentTimeTool(Tool):
    name = "current_time"
    description = "Return the current date and time in UTC (ISO 8601)."
    parameters = _object({})

    def __init__(self, clock: Clock = system_clock):
        self._clock = clock

    def run(self, arguments: dict[str, Any]) -> str:
        return iso_utc(self._clock())


# Bounds that keep arithmetic cheap: a huge power or product could take minutes and gigabytes.
MAX_EXPRESSION_CHARS = 1_000
MAX_EXPONENT = 1_000
MAX_RESULT_BITS = 10_000

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}


def _bounded_power(base: int | float, exponent: int | float) -> int | float:
    if abs(exponent) > MAX_EXPONENT:
        raise ToolError(f"exponent {exponent} is larger than {MAX_EXPONENT}")
    exact = isinstance(base, int) and isinstance(exponent, int) and exponent > 0
    if exact and abs(base).bit_length() * exponent > MAX_RESULT_BITS:
        raise ToolError("the result of this power is too large")
    result = base**exponent
    if isinstance(result, complex):
        raise ToolError("the result is not a real number")
    return result


def _check_size(value: int | float) -> int | float:
    if isinstance(value, int) and value.bit_length() > MAX_RESULT_BITS:
        raise ToolError("the result is too large")
    if isinstance(value, float) and not math.isfinite(value):
        raise ToolError("the result is not a finite number")
    return value


def _evaluate(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in (*_BINARY, ast.Pow):
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow):
            return _check_size(_bounded_power(left, right))
        return _check_size(_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    raise ToolError(f"only arithmetic is allowed, not {type(node).__name__}")


def evaluate_arithmetic(expression: str) -> int | float:
    """Return the value of an arithmetic expression: numbers, + - * / // % **, parentheses."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
        return _evaluate(tree.body)
    except SyntaxError as exc:
        raise ToolError(f"not an arithmetic expression: {exc.msg}") from exc
    except ZeroDivisionError as exc:
        raise ToolError("division by zero") from exc
    except (OverflowError, RecursionError, MemoryError, ValueError) as exc:
        raise ToolError(f"cannot compute this expression: {type(exc).__name__}") from exc


class CalculatorTool(Tool):
    name = "calculator"
    description = (
        "Evaluate an arithmetic expression: numbers, + - * / // % ** and parentheses. "
        "No names, functions or other syntax."
    )
    parameters = _object(
        {"expression": {"type": "string", "maxLength": MAX_EXPRESSION_CHARS}}, ["expression"]
    )

    def run(self, arguments: dict[str, Any]) -> str:
        return str(evaluate_arithmetic(arguments["expression"]))


MAX_SLEEP_SECONDS = 30


class SleepTool(Tool):
    name = "sleep"
    description = f"Wait for the given number of seconds (at most {MAX_SLEEP_SECONDS})."
    parameters = _object(
        {"seconds": {"type": "number", "minimum": 0, "maximum": MAX_SLEEP_SECONDS}}, ["seconds"]
    )

    def __init__(self, sleeper: Callable[[float], None] | None = None):
        # None: wait on the cancellation signal, so a cancel stops the sleep at once.
        self._sleeper = sleeper

    def run(self, arguments: dict[str, Any]) -> str:
        return self.run_in(arguments, ToolContext())

    def run_in(self, arguments: dict[str, Any], context: ToolContext) -> str:
        seconds = arguments["seconds"]
        if self._sleeper is not None:
            self._sleeper(seconds)
            interrupted = context.cancelled.is_set()
        else:
            interrupted = context.cancelled.wait(seconds)
        if interrupted:
            raise ToolCancelled("the sleep was stopped by a cancellation")
        return f"slept {seconds} seconds"

    def limit_seconds(self, arguments: dict[str, Any]) -> float | None:
        return float(arguments.get("seconds") or 0) + 5.0


class FailTool(Tool):
    name = "fail"
    description = "Always fail with the given message (for testing error handling)."
    parameters = _object({"message": {"type": "string"}}, ["message"])

    def run(self, arguments: dict[str, Any]) -> str:
        raise ToolError(arguments["message"])


MAX_BIG_OUTPUT_CHARS = 200_000
_FILLER = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "


class BigOutputTool(Tool):
    name = "big_output"
    description = f"Return a filler text of the given length (at most {MAX_BIG_OUTPUT_CHARS})."
    parameters = _object(
        {"chars": {"type": "integer", "minimum": 0, "maximum": MAX_BIG_OUTPUT_CHARS}}, ["chars"]
    )

    def run(self, arguments: dict[str, Any]) -> str:
        chars = arguments["chars"]
        return (_FILLER * (chars // len(_FILLER) + 1))[:chars]


PLAN_STATUSES = ("pending", "in_progress", "completed")
MAX_PLAN_STEPS = 50


def render_plan(steps: list[dict[str, Any]]) -> str:
    """Return a plan as the text the instance keeps: one numbered line per step, status first."""
    return "\n".join(
        f"{number}. [{step['status']}] {' '.join(str(step['step']).split())}"
        for number, step in enumerate(steps, start=1)
    )


class UpdatePlanTool(Tool):
    """`update_plan{steps}`: replace the instance's plan, which compaction keeps verbatim.

    The plan's size is capped (see `agentloom.engine._measure.plan_reserve`); a longer plan is
    refused with an error that says how large it was and what the limit is.
    """

    name = "update_plan"
    description = (
        "Replace your plan: its steps in order, each pending, in_progress or completed. "
        "It stays in your context as written; an oversized plan is refused."
    )
    parameters = _object(
        {
            "steps": {
                "type": "array",
                "items": _object(
                    {"step": {"type": "string"}, "status": {"enum": list(PLAN_STATUSES)}},
                    ["step", "status"],
                ),
            }
        },
        ["steps"],
    )

    def run(self, arguments: dict[str, Any]) -> str:
        raise ToolError("update_plan needs the instance it runs in")

    def run_in(self, arguments: dict[str, Any], context: ToolContext) -> str:
        if context.set_plan is None:
            return self.run(arguments)
        steps = arguments["steps"]
        if not steps or len(steps) > MAX_PLAN_STEPS:
            raise ToolError(f"a plan has 1 to {MAX_PLAN_STEPS} steps, not {len(steps)}")
        if any(not step["step"].strip() for step in steps):
            raise ToolError("every step needs a description")
        plan = render_plan(steps)
        context.set_plan(plan)
        done = sum(1 for step in steps if step["status"] == "completed")
        return f"{PLAN_UPDATED}{len(steps)} steps, {done} completed\n{plan}"


# How an `update_plan` result that set a plan begins (a refused plan's result is an `ERROR: `).
PLAN_UPDATED = "plan updated: "


def plan_set_by(tool_name: str, result: str) -> str | None:
    """Return the plan a recorded tool result set: the text after its first line, else None."""
    if tool_name != UpdatePlanTool.name or not result.startswith(PLAN_UPDATED):
        return None
    _, _, plan = result.partition("\n")
    return plan or None


class SearchHistoryTool(Tool):
    """`search_history{query, limit?, kinds?, runs?}`: search the records the instance may read.

    A built-in tool the agent is given by name; it runs in the calling instance's context
    (`ToolContext.search`), so it sees exactly what that instance may read back.
    """

    name = SEARCH_HISTORY
    # Kept short: the schema is sent with every request of every version that has the tool.
    description = (
        "Search all of this session's history, also what is no longer shown, by words or "
        "exact ids; best records first, with references."
    )
    parameters = _object(
        {
            "query": {"type": "string", "maxLength": MAX_QUERY_CHARS},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_HITS},
            "kinds": {"type": "array", "items": {"enum": list(SEARCHABLE_KINDS)}},
            "runs": {"type": "array", "items": {"type": "integer"}},
        },
        ["query"],
    )

    def run(self, arguments: dict[str, Any]) -> str:
        raise ToolError("search_history needs the instance it runs in")

    def run_in(self, arguments: dict[str, Any], context: ToolContext) -> str:
        if context.search is None:
            return self.run(arguments)
        return context.search(SearchQuery.from_arguments(arguments))


BUILTIN_TOOL_NAMES = (
    "echo",
    "current_time",
    "calculator",
    "sleep",
    "fail",
    "big_output",
    "update_plan",
    SEARCH_HISTORY,
)


def builtin_tools(
    *, clock: Clock = system_clock, sleeper: Callable[[float], None] | None = None
) -> dict[str, Tool]:
    """Return the built-in tools by name (`sleeper` replaces the sleep tool's real wait)."""
    tools: list[Tool] = [
        EchoTool(),
        CurrentTimeTool(clock),
        CalculatorTool(),
        SleepTool(sleeper),
        FailTool(),
        BigOutputTool(),
        UpdatePlanTool(),
        SearchHistoryTool(),
    ]
    return {tool.name: tool for tool in tools}


class ReadRecordTool(Tool):
    """`read_record{ref, offset, limit}`: a slice of a record the view shows only in part.

    Offered by the engine (not chosen per agent) to versions with a large-record policy, whenever
    the view holds a reference; `reader` is the calling instance's, so it reads only what that
    instance may see.
    """

    name = READ_RECORD
    description = (
        "Read part of a record that the conversation shows only as an excerpt or as a hidden "
        "tool result, by its reference (such as r3:7 or s:120). Returns the characters from "
        "`offset` on, at most `limit` of them and never more than fits one message."
    )
    parameters = _object(
        {
            "ref": {"type": "string", "maxLength": 64},
            "offset": {"type": "integer", "minimum": 0},
            "limit": {"type": "integer", "minimum": 1, "maximum": READ_MAX_CHARS},
        },
        ["ref"],
    )

    def __init__(self, reader: Callable[[str, int, int | None], str]):
        self._reader = reader

    def run(self, arguments: dict[str, Any]) -> str:
        return self._reader(arguments["ref"], arguments.get("offset", 0), arguments.get("limit"))


@dataclass(frozen=True)
class SubAgent:
    """A sub-agent: it has no model or policy of its own and uses its parent's."""

    name: str
    description: str
    system_prompt: str
    tools: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not _NAME.match(DELEGATE_PREFIX + self.name):
            raise ConfigurationError("sub_agents.name", f"{self.name!r} is not a valid tool name")
        object.__setattr__(self, "tools", tuple(self.tools))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SubAgent:
        """Read `{name, description, system_prompt, tools}`; any other field is refused."""
        allowed = {"name", "description", "system_prompt", "tools"}
        for key in data:
            if key not in allowed:
                raise ConfigurationError(f"sub_agents.{key}", "is not a sub-agent field")
        for key in ("name", "description", "system_prompt"):
            if not isinstance(data.get(key), str):
                raise ConfigurationError(f"sub_agents.{key}", "must be a string")
        tools = data.get("tools") or []
        if not isinstance(tools, list | tuple) or not all(isinstance(t, str) for t in tools):
            raise ConfigurationError("sub_agents.tools", "must be a list of tool names")
        return cls(data["name"], data["description"], data["system_prompt"], tuple(tools))

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "system_prompt": self.system_prompt,
            "tools": list(self.tools),
        }


class DelegateTool(Tool):
    """`delegate_<name>{task}`: run the sub-agent on a task and return its final answer."""

    def __init__(self, sub_agent: SubAgent, runner: Callable[[SubAgent, str], str]):
        self.sub_agent = sub_agent
        self.name = DELEGATE_PREFIX + sub_agent.name
        self.description = sub_agent.description or f"Delegate a task to {sub_agent.name}."
        self.parameters = _object({"task": {"type": "string"}}, ["task"])
        self._runner = runner

    def run(self, arguments: dict[str, Any]) -> str:
        return self._runner(self.sub_agent, arguments["task"])

    def limit_seconds(self, arguments: dict[str, Any]) -> float | None:
        # The child renews the lease through its own model and tool calls and its saves; it
        # stops at its next safe point when the run is cancelled.
        return None


class Toolset:
    """The tools one instance may use: only these are offered to the model or executed."""

    def __init__(self, tools: Iterable[Tool] = ()):
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            if not _NAME.match(tool.name):
                raise ConfigurationError("tools", f"{tool.name!r} is not a valid tool name")
            if tool.name in self._tools:
                raise ConfigurationError("tools", f"tool {tool.name!r} is listed twice")
            self._tools[tool.name] = tool
        self._schemas = [tool.schema() for tool in self._tools.values()]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._tools)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def schemas(self) -> list[dict[str, Any]]:
        """Return the tool definitions sent with every action request."""
        return list(self._schemas)


def build_toolset(tools: Iterable[str | Tool], registry: Mapping[str, Tool]) -> Toolset:
    """Return a toolset of `tools`: names are looked up in `registry`, tools taken as given."""
    chosen = []
    for item in tools:
        if isinstance(item, Tool):
            chosen.append(item)
        elif item in registry:
            chosen.append(registry[item])
        else:
            raise ConfigurationError("tools", f"unknown tool {item!r}")
    return Toolset(chosen)
