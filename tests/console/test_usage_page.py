"""The usage page: the spend record by day and by agent, model and member, as its reader may see."""

from __future__ import annotations

import datetime

import pytest

from sessions_app.models import UsageDay
from sessions_app.services.runs import session_create
from tests.factories import ask

pytestmark = pytest.mark.django_db


def _today() -> str:
    return datetime.datetime.now(datetime.UTC).date().isoformat()


@pytest.fixture
def used(session, version, alice, carol):
    ask(session, alice, "NONCE-usage-alice")
    carols = session_create(user=carol, agent_version=version, title="Carol's")
    ask(carols, carol, "NONCE-usage-carol")
    ask(carols, carol, "again")
    return session.space


def test_an_admin_sees_every_members_usage_with_charts_and_tables(used, alice, client_for):
    response = client_for(alice).get("/usage/", {"space": used.pk})
    assert response.status_code == 200
    page = response.content.decode()
    assert page.count("<svg") == 3 and "<script" not in page.split("</header>")[1]
    assert "NONCE" not in page
    report = response.context["report"]
    assert report["total"]["calls"] == 3 and report["total"]["runs_succeeded"] == 3
    members = {item["label"]: item["calls"] for item in report["groups"]["member"]}
    assert members == {"alice": 1, "carol": 2}
    assert [item["label"] for item in report["groups"]["agent"]] == ["Helper"]
    today = [day for day in report["days"] if day["day"].isoformat() == _today()]
    assert today[0]["calls"] == 3 and len(report["days"]) == 30


def test_a_member_sees_only_their_own(used, carol, client_for):
    report = client_for(carol).get("/usage/", {"space": used.pk}).context["report"]
    assert [item["label"] for item in report["groups"]["member"]] == ["carol"]
    assert report["total"]["calls"] == 2


def test_outside_the_space_the_page_is_not_found(used, bob, client_for):
    assert client_for(bob).get("/usage/", {"space": used.pk}).status_code == 404
    assert client_for(None).get("/usage/").status_code == 302


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"start": "2026-13-01"}, "start"),
        ({"start": "2026-02-01", "end": "2026-01-01"}, "start"),
        ({"start": "2024-01-01", "end": "2026-01-01"}, "end"),
        ({"csv": "everything"}, "csv"),
        ({"space": "x"}, "space"),
    ],
)
def test_a_bad_parameter_is_a_400_naming_it(used, alice, client_for, query, field):
    response = client_for(alice).get("/usage/", query)
    assert response.status_code == 400
    assert response.content.decode().startswith(f"{field}:")


def test_each_table_downloads_as_csv(used, alice, client_for):
    response = client_for(alice).get(
        "/usage/", {"space": used.pk, "start": _today(), "end": _today(), "csv": "member"}
    )
    assert response["Content-Type"].startswith("text/csv")
    lines = response.content.decode().splitlines()
    assert lines[0].startswith("member,calls,input_tokens")
    assert sorted(line.split(",")[:2] for line in lines[1:]) == [["alice", "1"], ["carol", "2"]]
    day = client_for(alice).get("/usage/", {"space": used.pk, "csv": "day"})
    assert len(day.content.decode().splitlines()) == 31


def test_the_page_reads_the_record_not_the_calls(used, alice, client_for):
    UsageDay.objects.filter(space=used).update(calls=7)
    report = client_for(alice).get("/usage/", {"space": used.pk}).context["report"]
    assert report["total"]["calls"] == 7 * UsageDay.objects.filter(space=used).count()
