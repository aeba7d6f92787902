"""The masks a new run is given: read back from the runs' stored compaction snapshots."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from sessions_app.models import MAIN_INSTANCE, CompactionSnapshot, SessionMessage
from sessions_app.selectors.masks import carried_masks
from sessions_app.services.deletion import session_delete
from tests.factories import ask, make_user

pytestmark = pytest.mark.django_db


def _seq(run, local: int) -> int:
    return SessionMessage.objects.get(run=run, instance=MAIN_INSTANCE, local_seq=local).seq


def _masking_session(alice, make_demo_session):
    """Return a session whose second run masked the first run's result and its own."""
    session = make_demo_session()
    first = ask(session, alice, '/tool echo {"text": "one"}')
    second = ask(session, alice, '/tool echo {"text": "two"}')
    result = _seq(first, 3)
    own = _seq(second, 3)
    assert own != 3, "local and session seqs differ here"
    # The second run masked the first run's result (as history named it) and its own.
    CompactionSnapshot.objects.create(
        run=second,
        instance=MAIN_INSTANCE,
        revision=9,
        snapshot={
            "view": [
                {"m": {"role": "system", "content": "sys"}},
                {"s": result, "as": "tool", "id": "r1-1-1", "mask": 1, "ref": f"s:{result}"},
                {"own": [1, 2]},
                {"own": [3, 3], "mask": 1, "ref": "r2:3"},
            ]
        },
    )
    return session, result, own


def test_a_snapshots_stubs_are_found_by_session_seq_with_their_references(
    alice, gateway, make_demo_session
):
    session, result, own = _masking_session(alice, make_demo_session)
    assert carried_masks(session.pk, after=0) == {result: f"s:{result}", own: "r2:3"}
    # Only runs after the view are read (their stubs apply to the view too), up to the limit.
    assert carried_masks(session.pk, after=result) == {result: f"s:{result}", own: "r2:3"}
    last = SessionMessage.objects.filter(session=session).order_by("-seq")[0].seq
    assert carried_masks(session.pk, after=last) == {}
    assert carried_masks(session.pk, after=0, up_to=result) == {result: f"s:{result}"}


def test_a_session_whose_runs_masked_nothing_has_no_masks(alice, gateway, make_demo_session):
    session = make_demo_session()
    ask(session, alice, '/tool echo {"text": "one"}')
    assert carried_masks(session.pk, after=0) == {}


def test_a_purged_sessions_masks_go_with_it(alice, gateway, make_demo_session):
    session, _, _ = _masking_session(alice, make_demo_session)
    make_user("root", superuser=True)
    session_delete(user=alice, session=session)
    call_command("purge_deleted_sessions", "--by", "root")
    assert not CompactionSnapshot.objects.filter(run__session_id=session.pk).exists()
    assert carried_masks(session.pk, after=0) == {}
