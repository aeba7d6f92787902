"""The PostgreSQL leg runs the tests that use the database, found as they are collected."""

from __future__ import annotations

import pytest

from tests.conftest import runs_in_the_postgresql_leg


def test_a_test_that_opens_no_database_runs_in_the_sqlite_leg_only(request):
    assert not runs_in_the_postgresql_leg(request.node)


def test_a_test_that_uses_the_database_through_a_fixture_runs_in_both_legs(request, alice):
    assert runs_in_the_postgresql_leg(request.node)


@pytest.mark.django_db
def test_a_test_marked_for_the_database_runs_in_both_legs(request):
    assert runs_in_the_postgresql_leg(request.node)


@pytest.mark.postgres_leg
def test_a_test_marked_for_the_postgresql_leg_runs_in_both_legs(request):
    assert runs_in_the_postgresql_leg(request.node)
