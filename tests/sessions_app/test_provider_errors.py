"""A known provider error reaches the run and its model call as a message to act on."""

from __future__ import annotations

import pytest

from agentloom.engine import ModelGateway
from agentloom.providers import ProviderError
from context_app import engine_adapter
from sessions_app.models import ModelCall, Run
from tests.factories import ask
from tests.sessions_app.conftest import SECRET

pytestmark = pytest.mark.django_db


class FailingGateway(ModelGateway):
    provider, model_id = "double", "local-demo"

    def __init__(self, error: ProviderError):
        self.error = error

    def complete(self, request):
        raise self.error


@pytest.mark.parametrize(
    ("error", "says"),
    [
        (ProviderError("quota", status=402), "top it up"),
        (ProviderError("reasoning_missing", status=400), "turn thinking off"),
        (ProviderError("model_unknown", status=404), "check the connection's model ID"),
        (ProviderError("rate_limit", status=429, retry_after=90), "retry after 90 s"),
    ],
)
def test_the_run_and_the_model_call_carry_the_mapped_message(alice, make_demo_session, error, says):
    engine_adapter.set_gateway_factory(lambda version, connection: FailingGateway(error))
    try:
        run = ask(make_demo_session(), alice, "hello")
    finally:
        engine_adapter.set_gateway_factory(None)
    assert run.status == Run.Status.FAILED
    call = ModelCall.objects.get(run=run)
    for text in (run.error, call.error):
        assert says in text
        assert SECRET not in text


def test_a_length_refusal_is_learned_and_the_run_says_to_republish(alice, make_demo_session):
    # The call keeps the provider's mapped message; the run learned a window from the refusal
    # (none named: half the refused size) that leaves no room, and says to republish.
    error = ProviderError("context_length", status=400)
    engine_adapter.set_gateway_factory(lambda version, connection: FailingGateway(error))
    try:
        run = ask(make_demo_session(), alice, "hello")
    finally:
        engine_adapter.set_gateway_factory(None)
    assert run.status == Run.Status.FAILED
    call = ModelCall.objects.filter(run=run).first()
    assert "check the connection's context window" in call.error
    assert run.error.startswith("context_window_learned") and "republish" in run.error
    assert SECRET not in run.error
