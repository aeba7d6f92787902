"""Projection points: a new run resumes projecting its history where an earlier load stopped.

A point is keyed by the binding, extends exactly the view the reusable-view rule chooses, goes
out of use with a revoked view, and goes with its session; resuming from it gives the history
that projecting the journal gives.
"""

from __future__ import annotations

import json

import pytest
from django.test import override_settings

from agentloom import encryption
from agentloom.engine import history_judge, rendering_of
from context_app.engine_adapter import version_binding
from sessions_app.models import ProjectionPoint, SessionView
from sessions_app.selectors.history import (
    DECRYPTED_POINTS,
    history_for_new_run,
    inherited_history,
    main_records_after,
    project_after_view,
)
from sessions_app.selectors.views import compliant_view
from sessions_app.services import projection_points
from sessions_app.services.deletion import session_delete, session_purge
from sessions_app.services.execution import run_execute
from sessions_app.services.reusable_views import view_revoke
from sessions_app.services.runs import run_ask, supplement_add
from tests.factories import ask
from tests.sessions_app.conftest import long_question

pytestmark = pytest.mark.django_db


def _journal_projection(session, binding):
    """Project the journal from the chosen view (or the start), with no point: the reference."""
    view = compliant_view(session, binding)
    records = main_records_after(session, view.watermark if view else 0)
    return project_after_view(
        records, view, judge=history_judge(binding), rendering=rendering_of(binding).version
    )


def _same(history, reference) -> None:
    assert json.dumps(history.messages) == json.dumps(reference.messages)
    assert history.origins == reference.origins
    assert history.block() == reference.block()
    assert (history.user_turns, history.model_steps) == (
        reference.user_turns,
        reference.model_steps,
    )


def _echo_session(alice, make_demo_session, runs=6):
    session = make_demo_session()
    failed = ask(session, alice, "a question that fails [boom]")
    assert failed.status == "failed"
    with_supplement = run_ask(user=alice, session=session, question="NONCE-MAIN question")
    supplement_add(user=alice, run=with_supplement, text="NONCE-SUPPLEMENT detail")
    run_execute(run_id=with_supplement.pk)
    for n in range(runs):
        assert ask(session, alice, f'/tool echo {{"text": "NONCE-{n}"}}').status == "succeeded"
    return session


def test_a_new_run_resumes_from_the_point_and_inherits_what_the_journal_projects(
    alice, gateway, make_demo_session
):
    session = _echo_session(alice, make_demo_session)
    binding = version_binding(session.agent_version)
    row = ProjectionPoint.objects.get(session=session)
    assert row.view is None and row.watermark > 0

    loaded = inherited_history(session, binding)
    assert loaded.point_row is not None and loaded.point_row.pk == row.pk
    _same(loaded.history, _journal_projection(session, binding))
    # Read again from the database, not from the worker's memory: the same.
    DECRYPTED_POINTS.clear()
    _same(history_for_new_run(session, binding), _journal_projection(session, binding))


def test_a_point_stores_references_not_the_journal_text(alice, gateway, make_demo_session):
    session = _echo_session(alice, make_demo_session)
    state = ProjectionPoint.objects.get(session=session).state
    assert "NONCE-" not in json.dumps(state["body"])
    assert all("NONCE-" not in json.dumps(message) for message in state["inline"])


def test_a_point_is_used_only_under_its_own_binding(alice, gateway, make_demo_session):
    session = _echo_session(alice, make_demo_session)
    binding = version_binding(session.agent_version)
    assert inherited_history(session, binding).point_row is not None
    other = {**binding, "rendering": 1}
    assert inherited_history(session, other).point_row is None


def test_a_point_is_never_chosen_over_the_view_the_rule_chooses(alice, gateway, make_demo_session):
    session = make_demo_session(context_window=9_000)
    for n in range(4):
        ask(session, alice, long_question(n))
    binding = version_binding(session.agent_version)
    view = compliant_view(session, binding)
    assert view is not None
    # A point made before any view, even one reaching further, does not stand for the view.
    ProjectionPoint.objects.create(
        session=session,
        binding_key=inherited_history(session, binding).binding_key,
        view=None,
        watermark=10**9,
        state={"body": {}, "inline": []},
    )
    loaded = inherited_history(session, binding)
    assert loaded.view is not None and loaded.view.pk == view.pk
    assert loaded.point_row is None or loaded.point_row.view_id == view.pk
    _same(loaded.history, _journal_projection(session, binding))


def test_a_revoked_view_takes_its_points_out_of_use(alice, gateway, make_demo_session, monkeypatch):
    session = make_demo_session(context_window=9_000)
    for n in range(8):
        ask(session, alice, long_question(n))
    binding = version_binding(session.agent_version)
    view = compliant_view(session, binding)
    # A point after the chosen view, saved however few records follow it.
    monkeypatch.setattr(projection_points, "POINT_STRIDE", 1)
    ask(session, alice, "one more question")
    view = compliant_view(session, binding)
    assert ProjectionPoint.objects.filter(session=session, view=view).exists()
    assert inherited_history(session, binding).point_row.view_id == view.pk

    view_revoke(user=alice, session=session, revision=view.revision)

    loaded = inherited_history(session, binding)
    assert loaded.point_row is None or loaded.point_row.view_id not in (
        view.pk,
        *SessionView.objects.filter(derived_from=view).values_list("pk", flat=True),
    )
    _same(loaded.history, _journal_projection(session, binding))


def test_a_point_within_as_of_only(alice, gateway, make_demo_session):
    session = _echo_session(alice, make_demo_session)
    binding = version_binding(session.agent_version)
    row = ProjectionPoint.objects.get(session=session)
    queued = run_ask(user=alice, session=session, question="queued")
    type(queued).objects.filter(pk=queued.pk).update(inherited_watermark=row.watermark - 1)
    queued.refresh_from_db()

    loaded = inherited_history(session, binding, as_of=queued)

    assert loaded.point_row is None
    assert loaded.history.watermark <= row.watermark - 1


def test_decrypted_points_are_served_only_under_the_keys_they_were_read_with(
    alice, gateway, make_demo_session
):
    session = _echo_session(alice, make_demo_session)
    row = ProjectionPoint.objects.get(session=session)
    assert DECRYPTED_POINTS.get(row.pk, row.watermark) is not None
    with override_settings(FIELD_ENCRYPTION_KEY_FALLBACKS=["another-field-key-0123456789abcdef"]):
        assert DECRYPTED_POINTS.get(row.pk, row.watermark) is None


def test_purging_a_session_removes_its_points(alice, gateway, make_demo_session):
    session = _echo_session(alice, make_demo_session)
    assert ProjectionPoint.objects.filter(session=session).exists()
    alice.is_superuser = True
    alice.save(update_fields=["is_superuser"])
    session_delete(user=alice, session=session)
    session_purge(user=alice, session_id=session.pk)
    assert not ProjectionPoint.objects.filter(session_id=session.pk).exists()


def _decryptions(monkeypatch, call):
    """Return what `call()` returns and how many values it decrypted."""
    decrypted = []
    decrypt = encryption.decrypt

    def counted(token):
        decrypted.append(1)
        return decrypt(token)

    monkeypatch.setattr(encryption, "decrypt", counted)
    try:
        result = call()
    finally:
        monkeypatch.setattr(encryption, "decrypt", decrypt)
    return result, len(decrypted)


def test_a_load_from_a_point_under_update_plan_reads_only_the_records_after_it(
    alice, gateway, make_demo_session, monkeypatch
):
    # An agent that may set a plan and never does: the plan is decided by the point, so a load
    # decrypts the records after the point only, however long the session.
    session = make_demo_session(tools=["update_plan", "echo"])
    binding = version_binding(session.agent_version)
    for n in range(30):
        assert ask(session, alice, f'/tool echo {{"text": "NONCE-{n}"}}').status == "succeeded"
    loaded, decrypted = _decryptions(monkeypatch, lambda: inherited_history(session, binding))

    assert loaded.point_row is not None and loaded.history.plan is None
    since = len(main_records_after(session, loaded.point_row.watermark))
    assert since < 30
    assert decrypted <= since
    _same(loaded.history, _journal_projection(session, binding))


def test_a_plan_set_before_a_point_is_inherited_from_it(
    alice, gateway, make_demo_session, monkeypatch
):
    session = make_demo_session(tools=["update_plan", "echo"])
    binding = version_binding(session.agent_version)
    plan = '/tool update_plan {"steps": [{"step": "find NONCE-PLAN", "status": "pending"}]}'
    assert ask(session, alice, plan).status == "succeeded"
    for n in range(12):
        assert ask(session, alice, f'/tool echo {{"text": "NONCE-{n}"}}').status == "succeeded"
    DECRYPTED_POINTS.clear()
    loaded, _ = _decryptions(monkeypatch, lambda: inherited_history(session, binding))

    assert loaded.point_row is not None and loaded.point_row.watermark > 3
    assert "NONCE-PLAN" in loaded.history.plan
    assert loaded.history.plan == _journal_projection(session, binding).plan


def test_a_history_read_anew_is_measured_without_serialising_what_it_shows_as_recorded(
    alice, gateway, make_demo_session, monkeypatch
):
    # A worker that never read the session: the point and the records after it are decrypted
    # with the byte sizes they were stored with, and what history shows as recorded keeps them.
    import agentloom.engine._sizecache as sizecache_module
    from agentloom.engine import JsonBytesEstimator
    from agentloom.engine._sizecache import same_json

    session = _echo_session(alice, make_demo_session)
    ask(session, alice, "one more question after the point")
    binding = version_binding(session.agent_version)
    DECRYPTED_POINTS.clear()
    loaded = inherited_history(session, binding)
    assert loaded.point_row is not None
    history = loaded.history
    assert len(main_records_after(session, loaded.point_row.watermark)) > 0
    compact = json.dumps(history.messages, ensure_ascii=False, separators=(",", ":"))
    expected = 16 + 12 * len(history.messages) + len(compact.encode())
    serialised = []
    real = sizecache_module.canonical_json
    monkeypatch.setattr(
        sizecache_module, "canonical_json", lambda item: serialised.append(item) or real(item)
    )

    assert JsonBytesEstimator().estimate(history.messages, []) == expected
    journal = {record.seq: record.message for record in main_records_after(session, 0)}
    as_recorded = [
        origin is not None and "s" in origin and same_json(message, journal[origin["s"]])
        for message, origin in zip(history.messages, history.origins, strict=True)
    ]
    assert sum(as_recorded) > len(history.messages) // 2
    assert [id(item) for item in serialised] == [
        id(message)
        for message, recorded in zip(history.messages, as_recorded, strict=True)
        if not recorded
    ]
