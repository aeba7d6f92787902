"""Console pages: who may see them, what they show, and that user content stays text."""

from __future__ import annotations

import json
import re

import pytest
from django.urls import reverse

from agentloom.engine.testing import ScriptedGateway, text_response, tool_call_response
from agentloom.spaces.models import Membership
from context_app import engine_adapter
from context_app.models import Agent
from sessions_app.demo import ensure_demo
from sessions_app.models import Run
from sessions_app.services.runs import session_create
from tests.factories import ask, make_agent

pytestmark = pytest.mark.django_db

XSS = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def page_urls(session, run) -> list[str]:
    return [
        reverse("console-chat", args=[session.pk]),
        reverse("console-journal", args=[session.pk]),
        reverse("console-run-context", args=[run.pk]),
    ]


# --- access ----------------------------------------------------------------------------------


def test_anonymous_users_are_sent_to_the_admin_login(client_for, session, alice):
    run = ask(session, alice, "hello")
    for url in ["/", *page_urls(session, run)]:
        response = client_for().get(url)
        assert response.status_code == 302
        assert response["Location"] == f"/accounts/login/?next={url}"


def test_the_creator_sees_every_page(client_for, session, alice):
    run = ask(session, alice, '/tool echo {"text": "NONCE-1"}')
    client = client_for(alice)
    for url in ["/", *page_urls(session, run)]:
        assert client.get(url).status_code == 200, url


@pytest.mark.parametrize("who", ["carol", "bob"])
def test_anyone_else_gets_404(request, client_for, session, alice, other_space, who):
    """A member of the same space (carol) and a user of another space (bob) alike."""
    run = ask(session, alice, "hello")
    client = client_for(request.getfixturevalue(who))
    for url in page_urls(session, run):
        assert client.get(url).status_code == 404, url
    ask_url = reverse("console-ask", args=[session.pk])
    assert client.post(ask_url, {"question": "mine now?"}).status_code == 404
    assert Run.objects.filter(session=session).count() == 1


def test_a_creator_who_left_the_space_gets_404(client_for, session, alice, space):
    run = ask(session, alice, "hello")
    Membership.objects.filter(space=space, user=alice).delete()
    for url in page_urls(session, run):
        assert client_for(alice).get(url).status_code == 404


def test_ids_too_large_for_the_database_are_not_found(client_for, alice):
    assert client_for(alice).get(f"/sessions/{2**64}/").status_code == 404
    assert client_for(alice).get("/runs/99999999999999999999/context/").status_code == 404


# --- start page ------------------------------------------------------------------------------


def test_home_lists_spaces_agents_and_own_sessions(client_for, session, alice, carol, space):
    make_agent(space, alice, name="Unpublished draft")
    ask(session, alice, "first")
    ask(session, alice, '/tool fail {"message": "boom"}')
    carol_session = session_create(user=carol, agent_version=session.agent_version, title="Carol's")

    html = client_for(alice).get("/").content.decode()
    assert "Research" in html
    assert "Helper" in html and "New session" in html
    # A draft is listed as not published yet, without a way to open a session with it.
    draft_row = html[html.index("Unpublished draft") :].split("</tr>")[0]
    assert "Not published yet." in draft_row and "New session" not in draft_row
    assert "Alice&#x27;s chat" in html
    assert "#2" in html and "status-succeeded" in html
    assert "Carol&#x27;s" not in html
    assert "offline <em>demo model</em>" in html
    assert reverse("console-chat", args=[session.pk]) in html
    assert reverse("console-chat", args=[carol_session.pk]) not in html


def test_home_shows_the_admin_link_to_staff_only(client_for, alice, carol, space):
    alice.is_staff = True
    alice.save()
    assert 'href="/admin/"' in client_for(alice).get("/").content.decode()
    assert 'href="/admin/"' not in client_for(carol).get("/").content.decode()


def test_new_session_opens_the_latest_version_and_shows_its_chat(client_for, version, carol):
    response = client_for(carol).post(reverse("console-session-new"), {"agent": version.agent_id})
    session = carol.agent_sessions.get()
    assert session.agent_version == version
    assert response.status_code == 302
    assert response["Location"] == reverse("console-chat", args=[session.pk])


def test_new_session_refuses_agents_out_of_reach(client_for, version, bob, other_space):
    response = client_for(bob).post(reverse("console-session-new"), {"agent": version.agent_id})
    assert response.status_code == 404
    assert client_for(bob).post(reverse("console-session-new"), {"agent": "x"}).status_code == 404


def test_new_session_of_an_unpublished_agent_says_why(client_for, alice, space):
    draft = make_agent(space, alice, name="Draft")
    response = client_for(alice).post(
        reverse("console-session-new"), {"agent": draft.pk}, follow=True
    )
    assert "no published version" in response.content.decode()


# --- chat ------------------------------------------------------------------------------------


def test_chat_shows_questions_tool_calls_results_and_answers(client_for, session, alice):
    ask(session, alice, '/tool echo {"text": "NONCE-42"}')
    html = client_for(alice).get(reverse("console-chat", args=[session.pk])).content.decode()
    assert "Run #1" in html
    assert "/tool echo" in html  # the question
    assert 'class="tool-calls"' in html and "<code>echo</code>" in html
    assert 'class="tool-result"' in html and "NONCE-42" in html
    assert 'class="msg answer"' in html and "Based on the tool results" in html
    assert "Local demo" in html and "demo model" in html


def test_chat_links_the_bound_version_agent_and_connection_for_staff(client_for, session, alice):
    alice.is_staff = True
    alice.save()
    version = session.agent_version
    html = client_for(alice).get(reverse("console-chat", args=[session.pk])).content.decode()
    assert reverse("admin:context_app_agentversion_change", args=[version.pk]) in html
    assert reverse("admin:context_app_agent_change", args=[version.agent_id]) in html
    assert (
        reverse("admin:models_app_modelconnection_change", args=[version.model_connection_id])
        in html
    )


def test_asking_from_the_form_queues_a_run(
    client_for, session, alice, queued_runs, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = client_for(alice).post(
            reverse("console-ask", args=[session.pk]), {"question": "What is 2+2?"}
        )
    assert response.status_code == 302
    run = session.runs.get()
    assert run.status == Run.Status.QUEUED and queued_runs == [run.pk]


def test_a_question_refused_while_a_run_is_active_says_why(client_for, session, alice):
    client = client_for(alice)
    url = reverse("console-ask", args=[session.pk])
    client.post(url, {"question": "first"})
    response = client.post(url, {"question": "second"}, follow=True)
    html = response.content.decode()
    assert response.status_code == 200
    assert "A run of this session is still active" in html
    assert 'class="error"' in html
    assert session.runs.count() == 1
    # The page knows the run is active, so the script polls it and offers cancel/supplement.
    assert f'"activeRun": {session.runs.get().pk}' in html


def test_a_blank_question_is_refused_in_plain_words_and_the_api_names_the_field(
    client_for, session, alice
):
    client = client_for(alice)
    page = client.post(reverse("console-ask", args=[session.pk]), {"question": " \n "}, follow=True)
    assert "Type a question first." in page.text and "may not be blank" not in page.text
    assert not session.runs.exists()
    config = re.search(r'id="console-config"[^>]*>(.*?)</script>', page.text)[1]
    assert json.loads(config)["blankQuestion"] == "Type a question first."
    api = client.post(
        f"/api/v1/sessions/{session.pk}/runs", {"question": " "}, content_type="application/json"
    )
    assert (api.status_code, api.json()) == (400, {"question": ["This field may not be blank."]})


def test_user_content_is_escaped_on_every_page(client_for, session, alice):
    run = ask(session, alice, f'/tool echo {{"text": "{XSS.replace(chr(34), chr(39))}"}} {XSS}')
    client = client_for(alice)
    for url in page_urls(session, run):
        html = client.get(url).content.decode()
        assert "&lt;script&gt;alert(" in html, url
        assert "<script>alert(" not in html, url
        assert "<img src=x" not in html, url


@pytest.fixture
def hostile_model():
    """A model that names a tool with markup (a real provider could return anything)."""
    script = ScriptedGateway([tool_call_response(("</script><b>x", {})), text_response("done")])
    engine_adapter.set_gateway_factory(lambda version, connection: script)
    yield script
    engine_adapter.set_gateway_factory(None)


def test_fragments_the_script_fetches_escape_what_they_show(
    client_for, session, alice, hostile_model
):
    """Tool call names reach the live chat in the server's templates, escaped like the page."""
    run = ask(session, alice, "call your tool")
    client = client_for(alice)
    for url in (
        reverse("console-chat-records", args=[session.pk]) + "?after=0",
        reverse("console-run-block", args=[run.pk]),
        reverse("console-run-panel", args=[run.pk]),
    ):
        html = client.get(url).content.decode()
        assert "<b>" not in html and "&lt;/script&gt;&lt;b&gt;x" in html, url


# --- journal viewer --------------------------------------------------------------------------


def test_journal_shows_every_instance_with_kinds_and_run_boundaries(client_for, session, alice):
    ask(session, alice, "plain")
    ask(session, alice, '/tool delegate_researcher {"task": "/tool echo {\\"text\\": \\"hi\\"}"}')
    html = client_for(alice).get(reverse("console-journal", args=[session.pk])).content.decode()
    assert html.count('class="run-boundary"') == 2
    for kind in ("user_input", "assistant", "tool_result", "status"):
        assert f"kind-{kind}" in html
    assert 'data-instance="2.1"' in html and 'data-instance="main"' in html
    assert '<option value="2.1"' in html


def test_journal_filters_by_child_instance(client_for, session, alice):
    ask(session, alice, '/tool delegate_researcher {"task": "/tool echo {\\"text\\": \\"hi\\"}"}')
    url = reverse("console-journal", args=[session.pk])
    html = client_for(alice).get(url, {"instance": "1.1"}).content.decode()
    assert 'data-instance="1.1"' in html
    assert 'data-instance="main"' not in html
    assert '<option value="1.1" selected>' in html


def test_journal_all_instances_is_no_filter(client_for, session, alice):
    ask(session, alice, '/tool delegate_researcher {"task": "/tool echo {\\"text\\": \\"hi\\"}"}')
    url = reverse("console-journal", args=[session.pk])
    html = client_for(alice).get(url, {"instance": ""}).content.decode()
    assert "That filter is not valid" not in html
    assert 'data-instance="1.1"' in html and 'data-instance="main"' in html
    assert '<option value="" selected>All instances</option>' in html
    rows = client_for(alice).get(
        reverse("console-journal-rows", args=[session.pk]), {"instance": ""}
    )
    assert rows.status_code == 200


def test_journal_refuses_a_malformed_filter_and_shows_everything(client_for, session, alice):
    ask(session, alice, "plain")
    url = reverse("console-journal", args=[session.pk])
    html = client_for(alice).get(url, {"instance": "main; drop"}).content.decode()
    assert "That filter is not valid" in html
    assert 'data-instance="main"' in html


def test_journal_pages_with_load_more(client_for, session, alice):
    ask(session, alice, '/tool echo {"text": "a"}')  # five records
    url = reverse("console-journal", args=[session.pk])
    client = client_for(alice)
    first = client.get(url, {"limit": 2}).content.decode()
    assert first.count('class="rec ') == 2
    assert 'id="load-more"' in first and "after=2&amp;limit=2" in first
    last = client.get(url, {"limit": 2, "after": 4}).content.decode()
    assert last.count('class="rec ') == 1
    assert 'id="load-more"' not in last and "End of the journal." in last


# --- context page ----------------------------------------------------------------------------


def test_context_page_shows_meter_view_calls_and_compaction_history(client_for, alice):
    space = ensure_demo(owner=alice)
    version = Agent.objects.get(space=space).versions.get()
    session = session_create(user=alice, agent_version=version)
    runs = [ask(session, alice, '/tool big_output {"chars": 1500}') for _ in range(5)]
    # Until a run makes a summary call (which one depends on the window and the tools' share).
    while not runs[-1].model_calls.filter(purpose="compaction").exists():
        runs.append(ask(session, alice, '/tool big_output {"chars": 1500}'))
        assert len(runs) <= 12, "1,500-character results must compact on the demo window"
    assert runs[-1].status == Run.Status.SUCCEEDED
    compacted = [runs[-1]]

    html = (
        client_for(alice)
        .get(reverse("console-run-context", args=[compacted[-1].pk]))
        .content.decode()
    )
    assert "Context meter" in html and "data-meter-fill" in html
    assert 'id="compactions"' in html and "outcome-succeeded" in html
    assert 'id="session-views"' in html and "r1" in html
    assert 'id="model-calls"' in html and "purpose-compaction" in html
    assert "handoff summary" in html  # the compacted view's summary message
    assert re.search(r"<td class=\"nowrap\">[\d,]+ / [\d,]+ / [\d,]+</td>", html)  # usage


def test_a_user_who_is_not_staff_logs_in_to_the_console(client, django_user_model):
    django_user_model.objects.create_user(username="enduser", password="pw-enduser-123")
    page = client.get("/accounts/login/?next=/")
    assert page.status_code == 200 and b'name="username"' in page.content
    response = client.post(
        "/accounts/login/", {"username": "enduser", "password": "pw-enduser-123", "next": "/"}
    )
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/").status_code == 200


# --- fragments the pages poll ----------------------------------------------------------------


def test_chat_records_after_a_seq_name_results_after_calls_read_before(client_for, session, alice):
    run = ask(session, alice, '/tool echo {"text": "NONCE-FRAG"}')
    seqs = list(run.messages.order_by("seq").values_list("seq", "kind"))
    call_seq = next(seq for seq, kind in seqs if kind == "assistant")
    url = reverse("console-chat-records", args=[session.pk])
    response = client_for(alice).get(f"{url}?after={call_seq}&run={run.pk}")
    html = response.content.decode()
    assert response["X-Last-Seq"] == str(seqs[-1][0])
    assert f'data-records-for="{run.pk}"' in html and f'data-marks-for="{run.pk}"' in html
    # The result read here is named after the call read in an earlier fetch.
    assert "Result of <code>echo</code>" in html
    assert f'data-seq="{call_seq}"' not in html


def test_journal_rows_continue_a_run_without_a_second_heading(client_for, session, alice):
    first = ask(session, alice, "one")
    ask(session, alice, "two")
    url = reverse("console-journal-rows", args=[session.pk])
    client = client_for(alice)
    response = client.get(f"{url}?after=1&limit=2&run={first.pk}")
    html = response.content.decode()
    assert html.count('class="run-boundary"') == 0  # records 2 and 3 of run #1
    assert (response["X-Next-After"], response["X-Has-More"]) == ("3", "true")
    response = client.get(f"{url}?after=3&limit=10&run={first.pk}")
    assert response.content.decode().count('class="run-boundary"') == 1  # run #2 starts
    assert response["X-Has-More"] == "false"
    assert client.get(f"{url}?instance=bad").status_code == 400


def test_fragments_are_404_to_anyone_else(client_for, session, alice, carol):
    run = ask(session, alice, "hello")
    client = client_for(carol)
    for url in (
        reverse("console-chat-records", args=[session.pk]),
        reverse("console-journal-rows", args=[session.pk]),
        reverse("console-run-block", args=[run.pk]),
        reverse("console-run-panel", args=[run.pk]),
        reverse("console-run-meter", args=[run.pk]),
    ):
        assert client.get(url).status_code == 404, url
    own = client_for(alice)
    assert (
        own.get(reverse("console-chat-records", args=[session.pk]) + "?after=x").status_code == 404
    )
    # A cursor beyond any seq is the end of the chat, however large.
    beyond = own.get(reverse("console-chat-records", args=[session.pk]) + "?after=" + "9" * 40)
    assert beyond.status_code == 200


def test_journal_search_ranks_matching_records_across_instances(client_for, session, alice):
    ask(session, alice, "The release tag is v2.14.3 on /srv/releases/app.tar.gz")
    ask(
        session,
        alice,
        '/tool delegate_researcher {"task": "/tool echo {\\"text\\": \\"NONCE-SUB\\"}"}',
    )
    ask(session, alice, "unrelated words only")
    url = reverse("console-journal", args=[session.pk])
    client = client_for(alice)
    html = client.get(url, {"q": "/srv/releases/app.tar.gz"}).content.decode()
    assert "match <q>/srv/releases/app.tar.gz</q>" in html
    assert "unrelated words only" not in html
    assert 'data-seq="1"' in html and 'class="run-boundary"' in html
    # Every instance's records, or one instance's; a sub-agent's tool result names its tool.
    found = client.get(url, {"q": "NONCE-SUB"}).content.decode()
    assert 'data-instance="2.1"' in found and "Result of <code>echo</code>" in found
    only_main = client.get(url, {"q": "NONCE-SUB", "instance": "main"}).content.decode()
    assert 'data-instance="2.1"' not in only_main
    # Text with nothing to search for says so; server text is escaped.
    empty = client.get(url, {"q": "  !!  "}).content.decode()
    assert "no word or identifier" in empty.lower()
    escaped = client.get(url, {"q": "<b>x</b>"}).content.decode()
    assert "<b>x</b>" not in escaped and "&lt;b&gt;x&lt;/b&gt;" in escaped
    assert client.get(url, {"q": "x" * 501}).status_code == 200  # too long: the timeline
