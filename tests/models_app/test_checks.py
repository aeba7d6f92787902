"""`manage.py check` warns about manifest entries verified more than 180 days ago."""

from __future__ import annotations

import datetime

import pytest
from django.core import checks as django_checks
from django.core.management import call_command

from models_app import checks


def _warnings():
    return [m for m in django_checks.run_checks() if m.id == checks.STALE_MANIFEST]


def test_no_warning_while_every_entry_is_fresh(monkeypatch):
    monkeypatch.setattr(checks, "today", lambda: datetime.date(2026, 10, 1))
    assert _warnings() == []


def test_the_warning_lists_the_stale_entries(monkeypatch):
    monkeypatch.setattr(checks, "today", lambda: datetime.date(2027, 5, 30))
    (warning,) = _warnings()
    assert warning.level == django_checks.WARNING
    assert "openai/gpt-5.4 (verified 2026-11-30)" in warning.msg
    assert "deepseek/deepseek-v4-pro" not in warning.msg  # verified 2026-12-01
    assert "deepseek/deepseek-chat" not in warning.msg  # retired: history


def test_manage_py_check_prints_it(monkeypatch, capsys):
    monkeypatch.setattr(checks, "today", lambda: datetime.date(2027, 12, 1))
    call_command("check")
    err = capsys.readouterr().err
    assert "models_app.W001" in err and "openai/gpt-5.4 (verified 2026-11-30)" in err


@pytest.mark.django_db
def test_the_model_page_says_when_manifest_values_are_old(monkeypatch, alice, space):
    from models_app.admin.connections import WindowSourceWidget

    widget = WindowSourceWidget(choices=[("official_manifest", "Official manifest")])
    widget.verified_on = "2026-04-26"
    monkeypatch.setattr(checks, "today", lambda: datetime.date(2026, 11, 30))
    assert "over 180 days ago" in widget.render("window_source", "official_manifest")
    monkeypatch.setattr(checks, "today", lambda: datetime.date(2026, 5, 1))
    assert "over 180 days ago" not in widget.render("window_source", "official_manifest")
