"""The address guard: what may be connected to, resolved once, connected to as checked."""

from __future__ import annotations

import ipaddress
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentloom.providers import (
    ProviderError,
    address_refusal,
    numeric_host,
    resolve_checked,
    secure_client,
)

KEY = "sk-test-addresses"


class StubResolver:
    """Answer from a table, or with a sequence of answers, and record every call."""

    def __init__(self, table=None, *, answers=None):
        self.table = table or {}
        self.answers = list(answers or [])
        self.calls: list[str] = []

    def __call__(self, host, port):
        self.calls.append(host)
        if self.answers:
            return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if host in self.table:
            return self.table[host]
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


def refusal_of(url, *, allow_private_hosts, resolver=None):
    resolver = resolver or StubResolver()
    with (
        secure_client(allow_private_hosts=allow_private_hosts, resolver=resolver) as client,
        pytest.raises(ProviderError) as caught,
    ):
        client.get_json(url, api_key=KEY)
    return caught.value


METADATA_URLS = [
    "http://169.254.169.254/latest/meta-data/",
    "http://169.254.169.254./latest/meta-data/",
    "http://2852039166/",  # decimal
    "http://0xa9fea9fe/",  # hex
    "http://0xA9.0xFE.0xA9.0xFE/",  # hex per byte
    "http://0251.0376.0251.0376/",  # octal
    "http://169.254.43518/",  # two short parts
    "http://169.16689662/",
    "http://[::ffff:169.254.169.254]/",  # IPv4-mapped IPv6
    "http://[::ffff:a9fe:a9fe]/",
    "http://[64:ff9b::a9fe:a9fe]/",  # NAT64
    "http://[fd00:ec2::254]/",  # AWS over IPv6
    "http://100.100.100.200/",  # Alibaba
    "http://[fe80::1]/",
    "http://169.254.0.1/",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://metadata/",
    "http://instance-data/",
    "http://METADATA.google.internal./",
    "http://0.0.0.0:8000/",
    "http://0/",
    "http://[::]/",
    "http://224.0.0.1/",
    "http://255.255.255.255/",
    "http://[ff02::1]/",
]


@pytest.mark.parametrize("url", METADATA_URLS)
def test_metadata_link_local_and_special_addresses_are_always_refused(url):
    resolver = StubResolver()
    error = refusal_of(url, allow_private_hosts=True, resolver=resolver)
    assert error.kind == "address_refused"
    # Literals and metadata names are judged without any lookup.
    assert resolver.calls == []


@pytest.mark.parametrize(
    "address",
    ["169.254.169.254", "fe80::a9fe:a9fe", "::ffff:169.254.169.254", "100.100.100.200", "0.0.0.0"],
)
def test_names_resolving_to_forbidden_addresses_are_refused(address):
    resolver = StubResolver({"models.example": [address]})
    error = refusal_of(
        "https://models.example/v1/models", allow_private_hosts=True, resolver=resolver
    )
    assert error.kind == "address_refused"
    assert resolver.calls == ["models.example"]


def test_one_forbidden_address_among_several_refuses_the_host():
    resolver = StubResolver({"models.example": ["127.0.0.1", "169.254.169.254"]})
    error = refusal_of(
        "http://models.example/v1/models", allow_private_hosts=True, resolver=resolver
    )
    assert error.kind == "address_refused"


PRIVATE_URLS = [
    "http://127.0.0.1:11434/v1/models",
    "http://127.1/v1/models",
    "http://2130706433/v1/models",  # 127.0.0.1 in decimal
    "http://[::1]:8000/v1/models",
    "http://[::ffff:127.0.0.1]/v1/models",
    "http://10.0.0.5/v1/models",
    "http://172.16.3.4/v1/models",
    "http://192.168.1.20/v1/models",
    "http://100.64.0.1/v1/models",
    "http://[fd12:3456::1]/v1/models",
]


@pytest.mark.parametrize("url", PRIVATE_URLS)
def test_loopback_and_private_addresses_need_the_setting(url):
    error = refusal_of(url, allow_private_hosts=False)
    assert error.kind == "address_refused"
    assert "private" in str(error)


@pytest.mark.parametrize("address", ["127.0.0.1", "::1", "10.1.2.3", "192.168.0.10", "fc00::5"])
def test_names_resolving_to_private_addresses_need_the_setting(address):
    resolver = StubResolver({"localhost": [address], "llm.internal.example": [address]})
    for host in ("localhost", "llm.internal.example"):
        error = refusal_of(
            f"http://{host}:8000/v1/models", allow_private_hosts=False, resolver=resolver
        )
        assert error.kind == "address_refused"


def test_with_the_setting_on_a_local_server_is_reached(provider_double):
    with secure_client(allow_private_hosts=True) as client:
        assert client.get_json(provider_double.base_url + "/models", api_key=KEY)["data"]


def test_the_connection_goes_to_the_address_that_was_checked(provider_double):
    # A rebinding resolver: safe on the first answer, metadata on any later one.
    resolver = StubResolver(answers=[["127.0.0.1"], ["169.254.169.254"]])
    url = f"http://models.example:{provider_double.port}/v1/models"
    with secure_client(allow_private_hosts=True, resolver=resolver) as client:
        assert client.get_json(url, api_key=KEY)["object"] == "list"
    assert resolver.calls == ["models.example"]
    # The name stays the request's authority; only the TCP connection uses the address.
    assert provider_double.requests[-1].headers["host"] == f"models.example:{provider_double.port}"


def test_an_unresolvable_name_is_a_network_error():
    error = refusal_of("http://nowhere.example/v1/models", allow_private_hosts=True)
    assert error.kind == "network"


@pytest.mark.parametrize(
    ("spelling", "address"),
    [
        ("2852039166", "169.254.169.254"),
        ("0xa9fea9fe", "169.254.169.254"),
        ("0XA9FEA9FE", "169.254.169.254"),
        ("0251.0376.0251.0376", "169.254.169.254"),
        ("169.254.43518", "169.254.169.254"),
        ("169.16689662", "169.254.169.254"),
        ("127.1", "127.0.0.1"),
        ("0", "0.0.0.0"),
        ("[::1]", "::1"),
        ("8.8.8.8.", "8.8.8.8"),
    ],
)
def test_numeric_spellings_are_read_like_inet_aton(spelling, address):
    assert numeric_host(spelling) == ipaddress.ip_address(address)


@pytest.mark.parametrize(
    "name", ["api.openai.com", "1.2.3.4.5", "09.1.1.1", "256.1.1.1", "1e3", ""]
)
def test_names_and_invalid_numbers_are_not_addresses(name):
    assert numeric_host(name) is None


@pytest.mark.parametrize(
    ("address", "allowed_with_setting", "allowed_without"),
    [
        ("8.8.8.8", True, True),
        ("2606:4700::1111", True, True),
        ("127.0.0.1", True, False),
        ("10.0.0.1", True, False),
        ("fd00::1", True, False),
        ("::ffff:10.0.0.1", True, False),
        ("169.254.169.254", False, False),
        ("fd00:ec2::254", False, False),
        ("2002:a9fe:a9fe::1", False, False),  # 6to4 wrapping of the metadata address
        ("::a9fe:a9fe", False, False),  # IPv4-compatible form
        ("240.0.0.1", False, False),
    ],
)
def test_address_policy(address, allowed_with_setting, allowed_without):
    ip = ipaddress.ip_address(address)
    assert (address_refusal(ip, allow_private_hosts=True) is None) is allowed_with_setting
    assert (address_refusal(ip, allow_private_hosts=False) is None) is allowed_without


def test_resolve_checked_returns_the_checked_addresses_once_each():
    resolver = StubResolver({"models.example": ["203.0.113.7", "203.0.113.7", "2001:db8::7"]})
    addresses = resolve_checked("models.example", 443, resolver=resolver, allow_private_hosts=False)
    assert addresses == ["203.0.113.7", "2001:db8::7"]
    assert resolver.calls == ["models.example"]


@settings(max_examples=60, deadline=None, database=None)
@given(st.integers(min_value=0xA9FE0000, max_value=0xA9FEFFFF))
def test_every_spelling_of_a_link_local_address_is_refused(number):
    address = ipaddress.IPv4Address(number)
    a, b, c, d = address.packed
    spellings = [
        str(number),
        hex(number),
        ".".join(oct(part).replace("0o", "0") for part in (a, b, c, d)),
        f"{a}.{b}.{c * 256 + d}",
        f"{a}.{b * 65536 + c * 256 + d}",
        f"::ffff:{address}",
        f"64:ff9b::{address}",
    ]
    for spelling in spellings:
        parsed = numeric_host(spelling)
        assert parsed is not None, spelling
        assert address_refusal(parsed, allow_private_hosts=True) is not None, spelling


def test_the_socket_guard_fails_any_connection_outside_loopback(no_external_connections):
    with pytest.raises(pytest.fail.Exception):
        socket.create_connection(("192.0.2.1", 80), timeout=0.1)
    with socket.socket() as sock, pytest.raises(pytest.fail.Exception):
        sock.connect(("198.51.100.7", 443))
    assert len(no_external_connections) == 2
    no_external_connections.clear()  # the refusals above were the point of this test
