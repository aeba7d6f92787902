"""Honest figures: every measurement names its unit, one call's estimate and error share a row,
thousands are separated, and runs are named by their number."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from context_app.models import Agent
from sessions_app.demo import ensure_demo
from sessions_app.models import ModelCall, RunSupplement
from sessions_app.services.runs import session_create
from sessions_app.templatetags.console_text import compaction_outcome, unit_name
from tests.factories import ask

pytestmark = pytest.mark.django_db


@pytest.fixture
def compacted(alice):
    """A demo session whose last run (the third or a later one) compacted its context."""
    space = ensure_demo(owner=alice)
    version = Agent.objects.get(space=space).versions.get()
    session = session_create(user=alice, agent_version=version)
    runs = []
    while len(runs) < 3 or not runs[-1].model_calls.filter(purpose="compaction").exists():
        runs.append(ask(session, alice, '/tool big_output {"chars": 600}'))
        assert len(runs) <= 12, "600-character results must compact the demo window"
    return session, runs


def test_units_are_named():
    assert unit_name(legacy=True) == "characters"
    assert unit_name(calibrated=True, estimator="bytes") == "calibrated tokens"
    assert unit_name(estimator="bytes") == "bytes"
    assert unit_name(estimator="o200k") == "o200k tokens"


def test_a_stage_that_grew_the_request_says_so():
    assert compaction_outcome({"outcome": "succeeded", "before": 900, "after": 1_200}) == (
        "grew the request"
    )
    assert compaction_outcome({"outcome": "succeeded", "before": 900, "after": 300}) == "succeeded"


def test_the_context_page_names_units_and_keeps_one_call_on_one_row(client_for, alice, compacted):
    _, runs = compacted
    run = runs[-1]
    html = client_for(alice).get(reverse("console-run-context", args=[run.pk])).text
    assert re.search(r"of <strong data-meter-budget>[\d,]+</strong> <span data-meter-unit>", html)
    calls = list(ModelCall.objects.filter(run=run, reported_prompt_tokens__isnull=False))
    assert calls
    for call in calls:
        row = html[html.index(f'id="model-call-{call.pk}"') :].split("</tr>")[0]
        assert f"{call.request_estimate:,} <span" in row
        assert f'{call.reported_prompt_tokens:,} <span class="quiet">provider tokens' in row
        if call.estimate_error is not None:
            assert f"estimate error {100 * call.estimate_error:+,.1f}%" in row
    last = calls[-1]
    assert (
        f"last call: estimated {last.request_estimate:,} " in html
        and f"<strong>{last.reported_prompt_tokens:,}</strong> provider tokens" in html
    )


def test_since_the_last_compaction_only_after_one(client_for, alice, compacted):
    _, runs = compacted
    panel = client_for(alice).get(reverse("console-run-panel", args=[runs[-1].pk])).text
    assert "since the last compaction" in panel
    first = client_for(alice).get(reverse("console-run-panel", args=[runs[0].pk])).text
    assert "since the last compaction" not in first


def test_runs_are_named_by_their_number(alice, compacted):
    _, runs = compacted
    call = ModelCall.objects.filter(run=runs[1]).first()
    assert str(call).endswith(f"call of run #{runs[1].number}")
    assert str(runs[1]).startswith(f"Run #{runs[1].number} of session")
    supplement = RunSupplement(run=runs[1], position=1)
    assert str(supplement) == f"Supplement 1 of run #{runs[1].number}"


def test_the_console_pages_separate_the_thousands_of_windows_and_sizes(client_for, alice):
    space = ensure_demo(owner=alice)
    version = Agent.objects.get(space=space).versions.get()
    session = session_create(user=alice, agent_version=version)
    ask(session, alice, '/tool big_output {"chars": 1500}')
    client = client_for(alice)
    window = version.snapshot["budget"]["context_window"]
    assert window >= 1_000
    chat = client.get(reverse("console-chat", args=[session.pk])).text
    assert f"window {window:,})" in chat
    journal = client.get(reverse("console-journal", args=[session.pk])).text
    sizes = re.findall(r"· ([\d,]+) chars", journal)
    assert sizes and "1,500" in sizes, sizes


def test_a_byte_estimate_says_why_its_error_against_tokens_is_large(client_for, alice, compacted):
    _, runs = compacted
    run = runs[-1]
    client = client_for(alice)
    note = "expected, as the estimate counts bytes and a byte count runs several times a token"
    context = client.get(reverse("console-run-context", args=[run.pk])).text
    panel = client.get(reverse("console-run-panel", args=[run.pk])).text
    calls = list(ModelCall.objects.filter(run=run, estimate_error__isnull=False))
    assert calls and all(call.estimator == "bytes" and call.estimate_error > 1 for call in calls)
    for call in calls:
        row = context[context.index(f'id="model-call-{call.pk}"') :].split("</tr>")[0]
        assert note in row
    last = f"estimate error {100 * calls[-1].estimate_error:+,.1f}%"
    for html in (context, panel):
        assert note in html[html.index(last) :][:300]


def test_a_token_estimate_shows_its_error_alone():
    from sessions_app.console.presenters import meter

    reported = {"tokens": 1_000, "estimate": 1_100, "estimate_error": 0.1, "estimator": "o200k"}
    context = {"ceiling": 10_000, "estimate": 1_100, "trigger_at": 8_000, "target_at": 6_000}
    shown = meter({**context, "compactions": [], "last_reported": reported})["last_reported"]
    assert (shown["error_percent"], shown["error_note"]) == ("+10.0", "")
    bytes_shown = meter(
        {**context, "compactions": [], "last_reported": {**reported, "estimator": "bytes"}}
    )["last_reported"]
    assert bytes_shown["error_note"].startswith("expected, as the estimate counts bytes")
