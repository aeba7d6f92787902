"""API tokens: only a digest at rest, the key shown once, expiry and revocation."""

from __future__ import annotations

import importlib
from datetime import timedelta
from io import StringIO
from types import SimpleNamespace

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from agentloom.errors import InvalidInput
from agentloom.spaces.models import ApiToken
from agentloom.spaces.services.tokens import key_digest, token_create, token_revoke

pytestmark = pytest.mark.django_db


def _call(key: str):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client.get("/api/v1/spaces/")


def _database_text() -> str:
    """Every text value of the token tables, as a database dump would show them."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT name, digest, prefix FROM spaces_apitoken")
        return " ".join(" ".join(row) for row in cursor.fetchall())


def test_only_a_digest_is_stored_and_the_key_works(alice):
    token, key = token_create(user=alice, name="ci")
    assert len(key) >= 40
    assert token.digest == key_digest(key) and key not in _database_text()
    assert token.prefix == key[:8]
    assert _call(key).status_code == 200
    assert _call(key[:-1] + ("A" if key[-1] != "A" else "B")).status_code == 401
    # The digest itself is no credential.
    assert _call(token.digest).status_code == 401


def test_a_revoked_token_stops_at_once(alice, bob):
    token, key = token_create(user=alice)
    from agentloom.errors import NotFound

    with pytest.raises(NotFound):
        token_revoke(user=bob, token=token)
    assert _call(key).status_code == 200
    token_revoke(user=alice, token=token)
    response = _call(key)
    assert response.status_code == 401
    assert response.json() == {"detail": "Invalid token."}
    assert ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=False).exists()


def test_an_expired_token_is_refused(alice):
    token, key = token_create(user=alice, expires_days=1)
    assert token.expires_at > timezone.now() + timedelta(hours=23)
    assert _call(key).status_code == 200
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert _call(key).status_code == 401


def test_an_inactive_users_token_is_refused(alice):
    _, key = token_create(user=alice)
    alice.is_active = False
    alice.save()
    assert _call(key).status_code == 401


@pytest.mark.parametrize("days", [0, -1, 3651])
def test_expiry_out_of_range_is_refused(alice, days):
    with pytest.raises(InvalidInput) as caught:
        token_create(user=alice, expires_days=days)
    assert caught.value.field == "expires_days"


def test_the_command_prints_the_key_once(alice):
    out, err = StringIO(), StringIO()
    call_command("create_api_token", "alice", "--expires-days", "30", stdout=out, stderr=err)
    key = out.getvalue().strip()
    token = ApiToken.objects.get()
    assert token.digest == key_digest(key)
    assert (token.expires_at - timezone.now()).days in (29, 30)
    assert key not in err.getvalue() and "cannot be shown again" in err.getvalue()
    assert _call(key).status_code == 200
    with pytest.raises(CommandError):
        call_command("create_api_token", "nobody", stdout=StringIO(), stderr=StringIO())
    with pytest.raises(CommandError, match="expires-days"):
        call_command("create_api_token", "alice", "--expires-days", "0", stdout=StringIO())


def test_drf_plaintext_tokens_are_gone():
    assert "rest_framework.authtoken" not in settings.INSTALLED_APPS
    auth = settings.REST_FRAMEWORK["DEFAULT_AUTHENTICATION_CLASSES"]
    assert "rest_framework.authentication.TokenAuthentication" not in auth


def test_the_migration_hashes_existing_keys_in_place(alice):
    """A key of DRF's old token table keeps working after the migration; the table is emptied."""
    legacy_key = "0123456789abcdef0123456789abcdef01234567"
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE authtoken_token "
            "(key varchar(40) PRIMARY KEY, created timestamp with time zone, user_id integer)"
            if connection.vendor == "postgresql"
            else "CREATE TABLE authtoken_token "
            "(key varchar(40) PRIMARY KEY, created datetime, user_id integer)"
        )
        cursor.execute(
            "INSERT INTO authtoken_token VALUES (%s, %s, %s)",
            [legacy_key, timezone.now() - timedelta(days=3), alice.pk],
        )
    assert _call(legacy_key).status_code == 401
    migration = importlib.import_module("agentloom.spaces.migrations.0006_api_tokens")
    from django.apps import apps

    # The migration reads and writes through the editor's connection only.
    migration.hash_existing_tokens(apps, SimpleNamespace(connection=connection))
    token = ApiToken.objects.get(user=alice)
    assert token.digest == key_digest(legacy_key) and token.name == "migrated"
    assert token.created_at < timezone.now() - timedelta(days=2)
    assert _call(legacy_key).status_code == 200
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM authtoken_token")
        assert cursor.fetchone()[0] == 0
        cursor.execute("DROP TABLE authtoken_token")
