"""Sessions against a self-hosted server double (llama-cpp-python's shapes): runs counted with
the server's tokenizer record the counts their hard check used and replay without the server; a
session that overflows the server's real window learns it, records it on the connection, and
answers its next question; its replay learns the same window."""

from __future__ import annotations

import pytest

from context_app.services.agents import agent_create, agent_publish
from sessions_app.models import ModelCall
from sessions_app.services.replay import replay_run
from sessions_app.services.runs import session_create
from tests.factories import ask, make_connection
from tests.support.llama_double import LlamaServerDouble

pytestmark = pytest.mark.django_db


@pytest.fixture
def llama(settings):
    settings.ALLOW_PRIVATE_MODEL_HOSTS = True
    with LlamaServerDouble("llama-cpp-python", n_ctx=4_096) as double:
        yield double


def session_on(user, space, double, **connection):
    values = {
        "provider": "openai_compatible",
        "base_url": double.base_url,
        "model_id": double.model_path,
        "context_window": 32_768,
        "max_output_tokens": 512,
        "safety_margin_tokens": 256,
        "window_source": "platform_default",
        **connection,
    }
    connection = make_connection(space, **values)
    agent = agent_create(
        user=user,
        space=space,
        name=f"agent-{connection.pk}",
        system_prompt="You are brief.",
        model_connection=connection.pk,
        tools=["echo", "big_output"],
    )
    version = agent_publish(user=user, agent=agent)
    return session_create(user=user, agent_version=version), connection


def test_a_server_counted_run_records_its_counts_and_replays_without_the_server(
    alice, space, llama
):
    session, _ = session_on(
        alice, space, llama, context_window=8_192, estimator="server", estimator_source="manual"
    )
    first = ask(session, alice, '/tool echo {"text": "NONCE-1"}')
    second = ask(session, alice, "What did the tool say?")
    assert [first.status, second.status] == ["succeeded", "succeeded"], second.error
    calls = list(ModelCall.objects.filter(run__session=session))
    assert calls and all(call.estimator == "server" for call in calls)
    for call in calls:
        assert call.counts["fallback"] is None and call.counts["server"] > 0
        assert call.request_estimate <= call.counts["upper_bound"]  # the check keeps margins
    asked = llama.tokenize_calls
    assert asked > 0
    assert replay_run(first).ok and replay_run(second).ok
    assert llama.tokenize_calls == asked  # a replay never asks the server


def test_an_overflow_is_learned_recorded_and_the_next_question_answers(alice, space, llama):
    # Discovered as such a server is: no window named, so the 32K platform default.
    session, connection = session_on(alice, space, llama)
    # Each run masks the older results again (a masking saves no view), so the history grows
    # by the stubs and the newest result until the server's window refuses it.
    runs = [
        ask(session, alice, f'/tool big_output {{"chars": 2500}} NONCE-{index}')
        for index in range(18)
    ]
    runs += [ask(session, alice, f"plain question {index}") for index in range(3)]
    assert [run.status for run in runs[-3:]] == ["succeeded"] * 3, runs[-1].error
    connection.refresh_from_db()
    assert connection.learned_window is not None and connection.learned_window < 32_768
    assert connection.window_source == "learned" and connection.learned_window_evidence
    assert connection.context_window == connection.learned_window
    for run in runs:
        report = replay_run(run)
        assert report.ok, (run.number, run.status, run.error, report.differences)
