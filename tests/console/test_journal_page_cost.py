"""A page of the journal costs what it shows: its queries and decryptions never grow with the
session's records and runs (the JSON page and the console's timeline alike)."""

from __future__ import annotations

import datetime

import pytest
from django.db import connection
from django.db.models.signals import post_init

from agentloom import encryption
from sessions_app.models import Run, SessionMessage
from tests.api.factories import client_for as api_client_for
from tests.support.journaled import RECORDS_PER_TURN, journaled_session

PAGE = 200
AFTER = 3 * RECORDS_PER_TURN  # from the start of a run: no earlier records name its calls


def page_cost(client, path: str, monkeypatch) -> tuple[int, int, int]:
    """Return the queries, the decryptions and the runs read of one request for `path`."""
    decrypted = []

    def counted(decrypt):
        def count(token):
            decrypted.append(1)
            return decrypt(token)

        return count

    # A value decrypted into a value or into its JSON text (the JSON page's messages).
    monkeypatch.setattr(encryption, "decrypt", counted(encryption.decrypt))
    monkeypatch.setattr(encryption, "decrypt_text", counted(encryption.decrypt_text))
    queries = []

    def count(execute, sql, params, many, context):
        queries.append(sql)
        return execute(sql, params, many, context)

    runs = []

    def run_read(sender, instance, **kwargs):
        runs.append(1)

    post_init.connect(run_read, sender=Run)
    try:
        with connection.execute_wrapper(count):
            answer = client.get(path)
    finally:
        post_init.disconnect(run_read, sender=Run)
        monkeypatch.undo()
    assert answer.status_code == 200
    return len(queries), len(decrypted), len(runs)


@pytest.mark.django_db
def test_a_journal_page_of_200_records_costs_the_same_in_a_session_twice_as_long(
    alice, client_for, monkeypatch
):
    session = journaled_session(alice, 50)  # 250 records: a full page after AFTER
    page = f"after={AFTER}&limit={PAGE}"
    pages = {
        "console": (client_for(alice), f"/sessions/{session.pk}/journal/?{page}"),
        "rows": (client_for(alice), f"/sessions/{session.pk}/journal/rows/?{page}"),
        "api": (api_client_for(alice), f"/api/v1/sessions/{session.pk}/messages?{page}"),
    }
    for client, path in pages.values():
        client.get(path)  # the session's user and the like, read once
    short = {name: page_cost(client, path, monkeypatch) for name, (client, path) in pages.items()}
    journaled_session(alice, 50, session=session)  # twice the records and the runs
    long = {name: page_cost(client, path, monkeypatch) for name, (client, path) in pages.items()}
    assert long == short
    for name, (_, decryptions, _) in short.items():
        # The page's records (and one to tell whether more follow), and a few others: the
        # session's title, its binding, the run the page links to.
        assert PAGE <= decryptions <= PAGE + 10, name


@pytest.mark.django_db
def test_a_rows_moment_is_written_in_the_sites_time_zone(alice, client_for, settings):
    settings.TIME_ZONE = "Europe/Paris"
    session = journaled_session(alice, 1)
    moment = datetime.datetime(2026, 12, 2, 4, 54, 32, 123456, tzinfo=datetime.UTC)
    SessionMessage.objects.filter(session=session, seq=1).update(created_at=moment)
    html = client_for(alice).get(f"/sessions/{session.pk}/journal/").content.decode()
    assert '<time datetime="2026-12-02T05:54:32.123456+01:00">2026-12-02 05:54:32</time>' in html
