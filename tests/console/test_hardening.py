"""Browser hardening: a strict CSP everywhere, no-store for signed-in users, login lockout, and
the API schema and docs behind login when DEBUG is off."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from agentloom.security import CONTENT_SECURITY_POLICY
from tests.factories import ask, make_user

pytestmark = pytest.mark.django_db

INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*application/json)[^>]*>", re.I)
INLINE_HANDLER = re.compile(r"<[^>]+\son[a-z]+\s*=", re.I)
INLINE_STYLE = re.compile(r"<[^>]+\sstyle\s*=|<style\b", re.I)


@pytest.fixture(autouse=True)
def fresh_axes():
    """Failed-login counts start at zero in every test, whatever ran before."""
    from axes.utils import reset

    reset()
    yield
    reset()


def _pages(session, run, alice):
    connection = session.agent.model_connection_id
    return [
        "/",
        f"/sessions/{session.pk}/",
        f"/sessions/{session.pk}/journal/",
        f"/runs/{run.pk}/context/",
        "/admin/",
        "/admin/models_app/modelconnection/add/",
        f"/admin/models_app/modelconnection/{connection}/change/",
        "/admin/sessions_app/session/",
        f"/admin/sessions_app/run/{run.pk}/change/",
        "/api/docs/",
        "/api/v1/sessions/",
    ]


def test_every_page_has_the_policy_and_no_inline_code(session, alice):
    from agentloom.spaces.models import Membership

    alice.is_staff = alice.is_superuser = True
    alice.save()
    assert Membership.objects.filter(user=alice, role="admin").exists()
    run = ask(session, alice, '/tool echo {"text": "<script>alert(1)</script>"}')
    browser = Client()
    browser.force_login(alice)
    for path in _pages(session, run, alice):
        response = browser.get(path)
        assert response.status_code == 200, path
        assert response["Content-Security-Policy"] == CONTENT_SECURITY_POLICY, path
        if response["Content-Type"].startswith("text/html"):
            page = response.content.decode()
            assert not INLINE_SCRIPT.search(page), (path, INLINE_SCRIPT.search(page))
            assert not INLINE_HANDLER.search(page), (path, INLINE_HANDLER.search(page))
            assert not INLINE_STYLE.search(page), (path, INLINE_STYLE.search(page))
    for path in ("/accounts/login/", "/admin/login/", "/healthz"):
        assert Client().get(path)["Content-Security-Policy"] == CONTENT_SECURITY_POLICY


def test_the_policy_admits_only_our_own_scripts():
    rules = dict(rule.split(" ", 1) for rule in CONTENT_SECURITY_POLICY.split("; "))
    assert rules["script-src"] == "'self'"
    assert rules["style-src"] == "'self'"
    assert rules["object-src"] == "'none'" and rules["frame-ancestors"] == "'none'"
    assert "unsafe" not in CONTENT_SECURITY_POLICY


def test_signed_in_answers_are_never_stored(session, alice):
    from tests.api.factories import client_for

    browser = Client()
    browser.force_login(alice)
    for path in ("/", f"/sessions/{session.pk}/", f"/api/v1/sessions/{session.pk}/"):
        assert "no-store" in browser.get(path)["Cache-Control"], path
    # Token callers too: DRF's user is seen once the view has run.
    api = client_for(alice)
    assert "no-store" in api.get(f"/api/v1/sessions/{session.pk}/messages")["Cache-Control"]
    assert "no-store" not in (Client().get("/healthz").get("Cache-Control") or "")


@pytest.mark.parametrize("login_url", ["/accounts/login/", "/admin/login/"])
def test_repeated_failed_logins_lock_the_account_out(settings, login_url):
    settings.AXES_FAILURE_LIMIT = 3
    user = make_user("dora", staff=True)
    browser = Client()
    for _ in range(3):
        failed = browser.post(login_url, {"username": "dora", "password": "wrong"})
        assert failed.status_code in (200, 429)
    locked = browser.post(login_url, {"username": "dora", "password": f"pw-{user.username}"})
    assert locked.status_code == 429
    assert "_auth_user_id" not in browser.session
    # Another account from the same address is not locked by dora's failures.
    make_user("emil", staff=True)
    other = Client().post(login_url, {"username": "emil", "password": "pw-emil"})
    assert other.status_code == 302


def test_a_successful_login_resets_the_count(settings):
    settings.AXES_FAILURE_LIMIT = 3
    make_user("dora")
    browser = Client()
    for _ in range(2):
        browser.post("/accounts/login/", {"username": "dora", "password": "wrong"})
    assert (
        browser.post("/accounts/login/", {"username": "dora", "password": "pw-dora"}).status_code
        == 302
    )
    fresh = Client()
    for _ in range(2):
        fresh.post("/accounts/login/", {"username": "dora", "password": "wrong"})
    assert (
        fresh.post("/accounts/login/", {"username": "dora", "password": "pw-dora"}).status_code
        == 302
    )


def test_schema_and_docs_need_a_login_without_debug(settings, alice):
    from tests.api.factories import client_for

    settings.DEBUG = False
    anon = Client()
    assert anon.get("/api/schema/").status_code == 401
    docs = anon.get("/api/docs/")
    assert docs.status_code == 302 and docs.url.startswith("/accounts/login/")
    assert anon.get("/api/docs/?script=").status_code == 302
    assert client_for(alice).get("/api/schema/?format=json").status_code == 200
    browser = Client()
    browser.force_login(alice)
    assert browser.get("/api/docs/").status_code == 200
    assert browser.get("/api/docs/?script=").status_code == 200
    settings.DEBUG = True
    assert anon.get("/api/schema/?format=json").status_code == 200
    assert anon.get("/api/docs/").status_code == 200
