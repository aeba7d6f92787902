"""Rendering 5 on the database journal: a new run's first request starts with the last request
of the run before it, byte for byte, its excerpts named as that run named them."""

from __future__ import annotations

import json

import pytest

from sessions_app.services.replay import replay_run
from tests.factories import ask

pytestmark = pytest.mark.django_db


def test_a_new_run_extends_the_last_request_of_the_run_before_it(alice, gateway, make_demo_session):
    session = make_demo_session(context_window=9_000)
    first = ask(session, alice, '/tool big_output {"chars": 3000} NONCE-1')
    assert first.status == "succeeded", first.error
    last = gateway.action_requests()[-1]
    gateway.requests.clear()
    second = ask(session, alice, "NONCE-2 and now?")
    assert second.status == "succeeded", second.error
    after = gateway.action_requests()[0]
    assert json.dumps(after.tools) == json.dumps(last.tools)
    shown = [json.dumps(message) for message in last.messages]
    assert [json.dumps(message) for message in after.messages[: len(shown)]] == shown
    assert len(after.messages) > len(shown)
    assert 'read_record(ref=\\"r1:' in json.dumps(after.messages)
    assert replay_run(second).ok
