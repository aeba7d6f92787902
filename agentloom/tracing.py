"""OpenTelemetry traces of runs, in the GenAI semantic conventions; off unless configured.

Conventions implemented: open-telemetry/semantic-conventions-genai at commit
55a32cddb97d99cec08d5ee081e74206a0636041 (schema 1.42.0; every `gen_ai.*` attribute used here is
at Development status there). Spans:

- `invoke_agent {agent}` per run execution: `gen_ai.operation.name`, `gen_ai.agent.name`,
  `gen_ai.agent.id`, `gen_ai.conversation.id` (the session), `agentloom.run.number`, the status;
- `chat {model}` per model call: provider, request and response model, `gen_ai.response.id`,
  `gen_ai.usage.input_tokens`, `…output_tokens`, `…cache_read.input_tokens`,
  `…reasoning.output_tokens`, `agentloom.call.purpose`, `error.type` when it failed;
- `execute_tool {tool}` per tool call the model made, for as long as it runs: `gen_ai.tool.name`
  (a tool the version lists, else `other`), `gen_ai.tool.call.id`, `error.type` when it failed;
  a call that never ran is one too, as long as its refusal took, its `error.type` saying why
  (the engine's `NOT_RUN`: `cancelled`, `denied`, `invalid_arguments`, `tool_unavailable` — an
  unknown tool, or one its server lists but that cannot be offered, such as a task-only MCP tool
  — and `outcome_unknown`, a call a resume found pending and answered without running it);
- `invoke_agent {sub-agent}` per sub-agent instance: `gen_ai.agent.name`, `agentloom.instance`,
  `agentloom.instance.status`;
- `agentloom.compaction` per compaction attempt, for as long as its work lasts (its summary calls
  included): `agentloom.compaction.stage` (the last it ran), `…stages` (when masking came before
  a summary), `…outcome`, `…reason`, `…triggers`, `…tokens_before`, `…tokens_after`;
- `agentloom.compaction.stage {stage}` per stage of an attempt (`masking`, `summary`), a child
  of its attempt, for as long as the stage lasted (a masking until the first summary call, a
  summary from it to the attempt's end): `agentloom.compaction.stage`, `…outcome`, `…reason`,
  `…tokens_before`, `…tokens_after`, `…calls`.

Parents: the web request (Django's instrumentation) → the Celery task (Celery's, which carries the
trace context in the task's headers) → `invoke_agent` → its calls, tools and compactions; a
compaction's summary calls under its span. A sub-agent is an agent invoked as a tool (the
conventions' agent-as-a-tool): its `invoke_agent` is a child of the delegation's `execute_tool`.
A run that waits for approval goes on in a new execution queued by the decision: its
`invoke_agent` is parented by the decision's request and task and linked to the span of the
execution that stopped to wait (see `sessions_app.services.execution._run_span`).

A run ended outside its engine (cancelled while queued or waiting, swept, failed before its
engine started) is a span `agentloom.run.end` under the request or task that ended it; the calls
it waited on for a decision are `execute_tool` spans under it that never ran (`cancelled`).

Rule: no message content unless `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` is true; then
only the model's answers (`gen_ai.output.messages`), as the journal holds them: redacted.

Processes: every process that loads Django configures its own provider (`sessions_app.apps`),
batched to the endpoint. `python -m agentloom.work` spawns its workers (`subprocess`, a new
interpreter each; the launcher itself never configures tracing), so each worker's export thread
is started in it, after its start. The one fork after tracing started is Celery's embedded beat
(`--beat`, a `multiprocessing` child): the SDK's batch processor starts its export thread again
in the child (`os.register_at_fork`). Both are tested against a loopback OTLP/HTTP receiver
(`tests/sessions_app/test_worker.py`).

Off (no endpoint set), `tracer()` is None and callers skip every span: nothing is imported and
nothing is measured, and the callers make no span attributes. On, a two-call run's five spans
cost about 1.0 million instructions of 63 million, 1.5–1.7% (`bench/observability.py
--instructions`), most of it in the SDK (span creation, attribute checks, the processor).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = [
    "capture_content",
    "configure",
    "configured",
    "content_attribute",
    "ended_span",
    "operation_span",
    "span_from",
    "tracer",
]

_TRACER: Any = None
_PROVIDER: Any = None
# What a span in the current context needs of OpenTelemetry, bound once it is configured.
_ATTACH: Any = None
_DETACH: Any = None
_IN_CONTEXT: Any = None
_ERROR: Any = None
CONVENTIONS_COMMIT = "55a32cddb97d99cec08d5ee081e74206a0636041"
SCHEMA_URL = "https://opentelemetry.io/schemas/1.42.0"


def tracer() -> Any:
    """Return the tracer, or None when tracing is off."""
    return _TRACER


def configured() -> bool:
    return _TRACER is not None


def capture_content() -> bool:
    """Return whether message content goes into spans (the GenAI conventions' setting)."""
    value = os.environ.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "")
    return value.strip().lower() in ("true", "1", "yes")


def configure(*, endpoint: str | None = None, exporter: Any = None, service: str = "agentloom"):
    """Switch tracing on: spans to the OTLP/HTTP `endpoint` (batched), or to `exporter` as they
    end (tests hand an in-memory one). Return the tracer provider."""
    global _TRACER, _PROVIDER, _ATTACH, _DETACH, _IN_CONTEXT, _ERROR
    from opentelemetry import context, trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    _TRACER = provider.get_tracer("agentloom", schema_url=SCHEMA_URL)
    _PROVIDER = provider
    _ATTACH, _DETACH, _IN_CONTEXT = context.attach, context.detach, trace.set_span_in_context
    _ERROR = trace.Status(trace.StatusCode.ERROR)
    return provider


def unconfigure() -> None:
    """Switch tracing off again (tests)."""
    global _TRACER, _PROVIDER
    _TRACER = _PROVIDER = None


def instrument_frameworks() -> None:
    """Trace Django's requests and Celery's tasks with this module's provider, so that a run's
    spans have their parents: the request that queued the task puts its trace context in the
    task's headers (W3C `traceparent`), and the worker's task span continues it."""
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.django import DjangoInstrumentor

    if _PROVIDER is None:
        raise RuntimeError("configure() tracing before instrumenting the frameworks")
    DjangoInstrumentor().instrument(tracer_provider=_PROVIDER)
    CeleryInstrumentor().instrument(tracer_provider=_PROVIDER)


def uninstrument_frameworks() -> None:
    """Stop tracing Django's requests and Celery's tasks (tests)."""
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.django import DjangoInstrumentor

    DjangoInstrumentor().uninstrument()
    CeleryInstrumentor().uninstrument()


@contextmanager
def span_from(
    name: str, attributes: dict[str, Any], links: tuple[tuple[str, str], ...] = ()
) -> Iterator[Any]:
    """Run the block in a current span `name` (a no-op yielding None when tracing is off),
    linked to the spans named by `links`: (trace id, span id) pairs in hex. An exception ends
    the span with its class name as `error.type`, never its message (it may quote content)."""
    if _TRACER is None:
        yield None
        return
    span = _TRACER.start_span(name, attributes=_clean(attributes), links=_links(links))
    token = _ATTACH(_IN_CONTEXT(span))
    try:
        yield span
    except BaseException as error:
        _failed(span, type(error).__name__)
        raise
    finally:
        _DETACH(token)
        span.end()


def _links(pairs: tuple[tuple[str, str], ...]) -> list[Any] | None:
    if not pairs:
        return None
    from opentelemetry.trace import Link, SpanContext, TraceFlags

    links = []
    for trace_id, span_id in pairs:
        try:
            context = SpanContext(
                trace_id=int(trace_id, 16),
                span_id=int(span_id, 16),
                is_remote=True,
                trace_flags=TraceFlags(TraceFlags.SAMPLED),
            )
        except ValueError:
            continue
        if context.is_valid:
            links.append(Link(context))
    return links or None


@contextmanager
def operation_span(name: str, attributes: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Run the block in a current span `name` (tracing on only); the block puts in the dict it
    is given the attributes known only at its end, `error` (a short kind) as `error.type` with
    an error status. An exception ends the span with its class name, never its message."""
    if _TRACER is None:  # switched off while the run went on
        yield {}
        return
    span = _TRACER.start_span(name, attributes=_clean(attributes))
    token = _ATTACH(_IN_CONTEXT(span))
    late: dict[str, Any] = {}
    try:
        yield late
    except BaseException as error:
        late["error"] = type(error).__name__
        raise
    finally:
        _DETACH(token)
        error = late.pop("error", None)
        if late:
            span.set_attributes(_clean(late))
        if error:
            _failed(span, error)
        span.end()


def _failed(span: Any, kind: str) -> None:
    span.set_attribute("error.type", kind)
    span.set_status(_ERROR)


def ended_span(
    name: str,
    attributes: dict[str, Any],
    *,
    seconds: float,
    error: str | None = None,
    ended_before: float = 0.0,
) -> None:
    """Record a span that lasted `seconds` and ended `ended_before` seconds ago (now by
    default), under the current span."""
    if _TRACER is None:
        return
    end = time.time_ns() - int(max(0.0, ended_before) * 1e9)
    span = _TRACER.start_span(
        name, attributes=_clean(attributes), start_time=end - int(max(0.0, seconds) * 1e9)
    )
    if error:
        _failed(span, error)
    span.end(end_time=end)


def content_attribute(message: Any) -> str:
    """Return an answer as the conventions' `gen_ai.output.messages` value (JSON text)."""
    content = message.get("content") if isinstance(message, dict) else None
    parts = [{"type": "text", "content": str(content)}] if content else []
    return json.dumps([{"role": "assistant", "parts": parts}])


def _clean(attributes: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in attributes.items() if value is not None}
