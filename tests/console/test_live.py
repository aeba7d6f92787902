"""The fragments the live pages poll: a session's state and the home page's sessions table."""

from __future__ import annotations

import pytest
from django.urls import reverse

from sessions_app.services.runs import run_ask
from tests.factories import ask

pytestmark = pytest.mark.django_db


def test_the_session_state_names_its_active_and_latest_run(client_for, session, alice, bob):
    url = reverse("console-session-state", args=[session.pk])
    client = client_for(alice)
    assert 'data-active-run="" data-latest-run="" data-latest-number="" data-last-seq="0"' in (
        client.get(url).text
    )
    done = ask(session, alice, "hello")
    state = client.get(url).text
    assert f'data-active-run="" data-latest-run="{done.pk}"' in state
    queued = run_ask(user=alice, session=session, question="again")
    state = client.get(url).text
    assert f'data-active-run="{queued.pk}" data-latest-run="{queued.pk}"' in state
    assert f'data-latest-number="{queued.number}"' in state
    assert client_for(bob).get(url).status_code == 404


def test_the_sessions_table_is_served_alone(client_for, session, alice, carol):
    ask(session, alice, "hello")
    html = client_for(alice).get(reverse("console-home-sessions")).text
    assert 'id="sessions-table"' in html and "Alice&#x27;s chat" in html and "#1" in html
    assert "Alice&#x27;s chat" not in client_for(carol).get(reverse("console-home-sessions")).text


def test_the_question_box_never_cuts_text(client_for, session, alice):
    html = client_for(alice).get(reverse("console-chat", args=[session.pk])).text
    box = html[html.index('<textarea id="question"') :].split(">")[0]
    assert "maxlength" not in box
    assert '"questionMaxChars": 100000' in html
