"""Fixtures for the history service: a published demo agent and gateways that record requests."""

from __future__ import annotations

import json

import pytest

from agentloom.engine import (
    HANDOFF_MARK,
    GatewayError,
    LocalDemoGateway,
    ModelGateway,
    ModelRequest,
    ModelResponse,
)
from context_app import engine_adapter
from context_app.services.agents import agent_create, agent_publish
from sessions_app.services.runs import session_create
from tests.factories import make_connection, make_space
from tests.support.openai_contract import assert_valid_request

SECRET = "sk-live-NONCE-5ecre7-key-0123456789"


class RecordingGateway(ModelGateway):
    """Wrap a gateway: validate and record every request; hooks may act during a call."""

    provider = "local"
    model_id = "local-demo"

    def __init__(self, inner: ModelGateway):
        self.inner = inner
        self.requests: list[ModelRequest] = []
        self.answered: list[tuple[ModelRequest, ModelResponse]] = []
        self.during_call = []  # callables run inside the next call, then dropped
        self.failed: set[str] = set()

    def complete(self, request: ModelRequest) -> ModelResponse:
        body = {"model": "local-demo", "messages": request.messages}
        if request.tools:
            body["tools"] = request.tools
        assert_valid_request(body)
        self.requests.append(request)
        text = json.dumps(request.messages)
        # A question marked [boom] meets a provider failure once: its resume goes through.
        users = [
            str(m.get("content"))
            for m in request.messages
            if m.get("role") == "user" and not str(m.get("content")).startswith(HANDOFF_MARK)
        ]
        latest = users[-1] if users else ""
        if "[boom]" in latest and request.purpose == "action" and latest not in self.failed:
            self.failed.add(latest)
            raise GatewayError("upstream", "the model provider failed", status=503)
        hooks, self.during_call = self.during_call, []
        for hook in hooks:
            hook()
        response = self.inner.complete(request)
        if "[leak-key]" in text and request.purpose == "action":
            response.message["content"] = f"my key is {SECRET}"
        self.answered.append((request, response))
        return response

    def action_requests(self) -> list[ModelRequest]:
        return [r for r in self.requests if r.purpose == "action"]

    def exchanges(self, purpose: str) -> list[tuple[ModelRequest, ModelResponse]]:
        """Return each answered request of `purpose` with its reply."""
        return [(request, reply) for request, reply in self.answered if request.purpose == purpose]


@pytest.fixture
def gateway():
    recording = RecordingGateway(LocalDemoGateway())
    engine_adapter.set_gateway_factory(lambda version, connection: recording)
    yield recording
    engine_adapter.set_gateway_factory(None)


@pytest.fixture
def make_demo_session(alice):
    """Return a factory of sessions of a freshly published demo agent."""

    def factory(
        *, context_window=200_000, policy=None, tools=None, sub_agents=None, provider="local"
    ):
        space = make_space(admin=alice)
        endpoint = {} if provider == "local" else {"base_url": "http://127.0.0.1:9/v1"}
        connection = make_connection(
            space,
            provider=provider,
            **endpoint,
            api_key=SECRET,
            context_window=context_window,
            max_output_tokens=1_000,
            safety_margin_tokens=200,
        )
        agent = agent_create(
            user=alice,
            space=space,
            name="Demo",
            system_prompt="You are the demo agent.",
            model_connection=connection.pk,
            tools=tools if tools is not None else ["echo", "calculator", "fail", "big_output"],
            sub_agents=sub_agents or [],
            context_policy=policy,
        )
        version = agent_publish(user=alice, agent=agent)
        return session_create(user=alice, agent_version=version)

    return factory


def long_question(n: int) -> str:
    """Return a question of about 1,500 characters: sessions of them need summaries, not masks."""
    return f"NONCE-{n}\n" + "question text with many plain words " * 40


@pytest.fixture
def view_refusals(monkeypatch):
    """Return `{run_id: [reason, …]}`: why each run's snapshots were refused as reusable views.

    Every save asks the view rule again for the run's newest snapshot until it is saved; the
    reasons are listed in order, a repeat of the previous one left out.
    """
    from sessions_app.services import journal

    refusals: dict[int, list[str]] = {}
    save = journal.snapshot_save

    def recording(**arguments):
        revision, reason = save(**arguments)
        reasons = refusals.setdefault(arguments["run_id"], [])
        if reason is not None and reasons[-1:] != [reason]:
            reasons.append(reason)
        return revision, reason

    monkeypatch.setattr(journal, "snapshot_save", recording)
    return refusals
