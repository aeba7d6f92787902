"""Readable records in the admin: JSON as a foldable tree, and links between admin and console."""

from __future__ import annotations

import pytest
from django.urls import reverse

from agentloom.spaces.admin_encrypted import HIDDEN
from agentloom.spaces.admin_json import json_tree
from agentloom.spaces.models import Membership
from sessions_app.models import ModelCall, SessionMessage
from sessions_app.services.runs import session_create
from tests.factories import ask, make_user

pytestmark = pytest.mark.django_db


def test_json_is_a_foldable_tree_of_text():
    html = json_tree({"a": [1, "<b>x</b>"], "long": "line\nbreak", "empty": {}})
    assert html.startswith('<div class="json-tree"><details class="json-node" open>')
    assert "<summary>3 keys</summary>" in html and "<summary>2 items</summary>" in html
    assert "&lt;b&gt;x&lt;/b&gt;" in html and "<b>" not in html
    assert '<pre class="json-text">line\nbreak</pre>' in html
    assert '<code class="json-scalar">{}</code>' in html


def test_deep_levels_start_folded():
    html = json_tree({"one": {"two": {"three": {"four": 4}}}})
    assert html.count('<details class="json-node" open>') == 2
    assert html.count('<details class="json-node">') == 2


@pytest.fixture
def root(space):
    user = make_user("root", superuser=True)
    Membership.objects.create(space=space, user=user, role=Membership.Role.ADMIN)
    return user


def test_admin_records_show_trees_and_console_links(client_for, session, alice, root):
    run = ask(session, alice, '/tool echo {"text": "NONCE-TREE"}')
    client = client_for(root)
    pages = {
        "run": reverse("admin:sessions_app_run_change", args=[run.pk]),
        "message": reverse(
            "admin:sessions_app_sessionmessage_change",
            args=[SessionMessage.objects.filter(kind="tool_result").get().pk],
        ),
        "call": reverse("admin:sessions_app_modelcall_change", args=[ModelCall.objects.first().pk]),
        "version": reverse(
            "admin:context_app_agentversion_change", args=[session.agent_version_id]
        ),
    }
    for name, url in pages.items():
        html = client.get(url).content.decode()
        assert '<div class="json-tree">' in html, name
        assert "admin_records/json_tree.css" in html, name
    run_page = client.get(pages["run"]).content.decode()
    assert reverse("console-run-context", args=[run.pk]) in run_page
    assert "NONCE-TREE" in client.get(pages["message"]).content.decode()
    call_page = client.get(pages["call"]).content.decode()
    assert reverse("console-run-context", args=[run.pk]) + "#model-call-" in call_page
    session_page = client.get(
        reverse("admin:sessions_app_session_change", args=[session.pk])
    ).content.decode()
    assert reverse("console-chat", args=[session.pk]) in session_page


def test_staff_who_are_not_superusers_still_see_no_payload(client_for, session, alice):
    run = ask(session, alice, '/tool echo {"text": "NONCE-SECRET"}')
    alice.is_staff = True
    alice.save()
    from django.contrib.auth.models import Permission

    alice.user_permissions.add(*Permission.objects.filter(content_type__app_label="sessions_app"))
    html = (
        client_for(alice)
        .get(reverse("admin:sessions_app_run_change", args=[run.pk]))
        .content.decode()
    )
    assert HIDDEN in html and "NONCE-SECRET" not in html
    assert reverse("console-run-context", args=[run.pk]) in html


def test_the_console_links_back_to_the_admin_for_staff_only(client_for, session, alice, carol):
    run = ask(session, alice, "hello")
    admin_run = reverse("admin:sessions_app_run_change", args=[run.pk])
    chat = reverse("console-chat", args=[session.pk])
    context = reverse("console-run-context", args=[run.pk])
    assert admin_run not in client_for(alice).get(chat).content.decode()
    alice.is_staff = True
    alice.save()
    assert admin_run in client_for(alice).get(chat).content.decode()
    html = client_for(alice).get(context).content.decode()
    assert admin_run in html
    call = ModelCall.objects.filter(run=run).first()
    assert reverse("admin:sessions_app_modelcall_change", args=[call.pk]) in html
    assert f'id="model-call-{call.pk}"' in html


def _listed(client, url: str, **query) -> str:
    response = client.get(url, query)
    assert response.status_code == 200
    return response.content.decode()


def test_the_admin_searches_sessions_runs_and_model_calls_newest_first(
    client_for, session, alice, root, version
):
    first = ask(session, alice, "one")
    second = ask(session, alice, "two")
    other = session_create(user=alice, agent_version=version, title="Other")
    client = client_for(root)
    sessions = reverse("admin:sessions_app_session_changelist")
    found = _listed(client, sessions, q=str(session.pk))
    assert f"/admin/sessions_app/session/{session.pk}/change/" in found
    assert f"/admin/sessions_app/session/{other.pk}/change/" not in found
    assert "Alice&#x27;s chat" in _listed(client, sessions, q="alice")
    assert "No sessions" not in _listed(client, sessions, q="Helper")
    assert "0 sessions" in _listed(client, sessions, q="nobody-by-that-name")
    everything = _listed(client, sessions)
    assert everything.index(f"/{other.pk}/change/") < everything.index(f"/{session.pk}/change/")

    runs = reverse("admin:sessions_app_run_changelist")
    listed = _listed(client, runs, q=str(session.pk))
    assert listed.index(f"/run/{second.pk}/change/") < listed.index(f"/run/{first.pk}/change/")
    assert f"/run/{first.pk}/change/" in _listed(client, runs, q="succeeded")
    assert f"/run/{first.pk}/change/" not in _listed(client, runs, q="failed")

    calls = reverse("admin:sessions_app_modelcall_changelist")
    call = ModelCall.objects.filter(run=first).first()
    assert f"/modelcall/{call.pk}/change/" in _listed(client, calls, q=str(first.pk))
    assert f"/modelcall/{call.pk}/change/" in _listed(client, calls, q="action")
    assert f"/modelcall/{call.pk}/change/" not in _listed(client, calls, q="compaction")
    assert f"/modelcall/{call.pk}/change/" in _listed(client, calls, q="local")
    newest = ModelCall.objects.order_by("-id").first()
    shown = _listed(client, calls)
    assert shown.index(f"/modelcall/{newest.pk}/change/") < shown.index(f"/modelcall/{call.pk}/")
