"""Fixtures of the provider tests: the provider double and a guard against real network use."""

from __future__ import annotations

import ipaddress
import socket

import pytest


def _loopback(address) -> bool:
    if not isinstance(address, tuple):
        return True  # a Unix socket path stays on this machine
    host = address[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(str(host).split("%", 1)[0]).is_loopback
    except ValueError:
        return False


@pytest.fixture(autouse=True)
def no_external_connections(monkeypatch):
    """Fail any test that opens a connection to anything but loopback."""
    attempts: list[object] = []
    original_connect = socket.socket.connect
    original_connect_ex = socket.socket.connect_ex
    original_create_connection = socket.create_connection

    def refuse(address) -> None:
        attempts.append(address)
        pytest.fail(f"a provider test tried to connect to {address!r}", pytrace=False)

    def connect(self, address):
        if not _loopback(address):
            refuse(address)
        return original_connect(self, address)

    def connect_ex(self, address):
        if not _loopback(address):
            refuse(address)
        return original_connect_ex(self, address)

    def create_connection(address, *args, **kwargs):
        if not _loopback(address):
            refuse(address)
        return original_create_connection(address, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "create_connection", create_connection)
    yield attempts
    # A refusal swallowed by library code must still fail the test.
    assert not attempts, f"connections outside loopback were attempted: {attempts}"


def pytest_addoption(parser, pluginmanager):
    # These tests need no Django and may run with `-p no:django`; the project's ini then names
    # an option nobody registered, which the warnings-as-errors setting turns into a failure.
    if not pluginmanager.has_plugin("django"):
        parser.addini("DJANGO_SETTINGS_MODULE", "read by pytest-django; unused without it")
