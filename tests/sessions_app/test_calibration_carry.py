"""Calibration carries over to a new run only when its request extends the reported one.

The provider double reports prompt tokens counted with its own tokenizer (words and punctuation
marks), never with the estimator under test.
"""

from __future__ import annotations

import json
import re

from agentloom.engine import LocalDemoGateway, ModelGateway, ModelRequest, ModelResponse
from context_app import engine_adapter
from sessions_app.models import ModelCall
from tests.factories import ask

_TOKEN = re.compile(r"\w+|[^\w\s]")


def own_tokens(request: ModelRequest) -> int:
    body = json.dumps({"messages": request.messages, "tools": request.tools}, ensure_ascii=False)
    return len(_TOKEN.findall(body))


class CountingProvider(ModelGateway):
    """The demo model on a byte-measured connection, reporting its own token counts."""

    provider, model_id = "openai_compatible", "counting"

    def __init__(self):
        self.demo = LocalDemoGateway()
        self.requests: list[tuple[ModelRequest, int]] = []

    def complete(self, request: ModelRequest) -> ModelResponse:
        tokens = own_tokens(request)
        self.requests.append((request, tokens))
        response = self.demo.complete(request)
        response.usage = {"prompt_tokens": tokens, "completion_tokens": 20}
        return response


def eight_questions(session, user) -> list:
    runs = []
    for n in range(8):
        text = f"NONCE-{n} " + "the shipment left the northern warehouse today " * 4
        runs.append(ask(session, user, f"/tool echo {json.dumps({'text': text})}"))
    return runs


def test_a_new_run_starts_from_the_last_reported_call_of_the_session(alice, make_demo_session):
    provider = CountingProvider()
    engine_adapter.set_gateway_factory(lambda version, connection: provider)
    try:
        session = make_demo_session(context_window=6_000, provider="openai_compatible")
        runs = eight_questions(session, alice)
    finally:
        engine_adapter.set_gateway_factory(None)

    assert [run.status for run in runs] == ["succeeded"] * 8
    effective = 6_000 - 1_000 - 200
    assert max(tokens for _, tokens in provider.requests) <= effective
    # From the second run on, the first request extends the last one reported in the session
    # (history keeps the run's call ids, rendering 3), so it is measured from reported tokens.
    for run in runs[1:]:
        first = ModelCall.objects.filter(run=run, purpose="action").order_by("id").first()
        assert first.calibration["base_tokens"] is not None, run.number
