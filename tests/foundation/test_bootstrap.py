"""The first start: an admin login printed once and a demo that is created once."""

from io import StringIO

import pytest
from django.core.management import call_command

from context_app.models import Agent, AgentVersion
from models_app.models import ModelConnection

pytestmark = pytest.mark.django_db


def test_bootstrap_prints_the_login_once_and_creates_the_demo_once(settings):
    settings.DEBUG = True
    first, second = StringIO(), StringIO()
    call_command("bootstrap_local", stdout=first)
    call_command("bootstrap_local", stdout=second)
    assert "password:" in first.getvalue()
    assert "password:" not in second.getvalue()
    assert Agent.objects.filter(name="Demo agent").count() == 1
    assert AgentVersion.objects.count() == 1
    demo = ModelConnection.objects.get()
    assert demo.provider == "local" and demo.effective_input_budget > 0
    snapshot = AgentVersion.objects.get().snapshot
    assert "delegate_researcher" not in snapshot["tools"]
    assert snapshot["sub_agents"][0]["name"] == "researcher"


def test_bootstrap_refuses_production(settings):
    from django.core.management.base import CommandError

    settings.DEBUG = False
    with pytest.raises(CommandError):
        call_command("bootstrap_local", stdout=StringIO())
