"""The secure client: no proxies, no redirects, bounded size and time, errors that leak nothing."""

from __future__ import annotations

import logging
import pickle
import socket

import httpcore
import httpcore2
import httpx
import httpx2
import pytest

from agentloom.engine import GatewayError
from agentloom.providers import KINDS, ProviderError, guarded_core_request, secure_client
from tests.support.provider_double import ProviderDouble

KEY = "sk-live-7Hq2SECRETKEYxZ93"
PROVIDER_SECRET = "PROVIDER-INTERNAL-TRACE-5d1f"


def local_client(**options):
    return secure_client(allow_private_hosts=True, **options)


def fetch_models(double, **options):
    with local_client(**options) as client:
        return client.get_json(double.base_url + "/models", api_key=KEY)


def test_returns_the_json_body_and_sends_the_key_as_a_bearer_token(provider_double):
    assert fetch_models(provider_double)["data"][0]["id"] == "gpt-4o"
    sent = provider_double.requests[-1]
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.headers["accept-encoding"] == "identity"


def test_environment_proxies_are_ignored(provider_double, monkeypatch):
    with ProviderDouble() as proxy:
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
            monkeypatch.setenv(name, proxy.origin)
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        # The environment really does send a client that trusts it to the proxy...
        with httpx.Client(trust_env=True) as trusting:
            trusting.get(provider_double.base_url + "/models")
        assert proxy.connections == 1
        # ...and the provider client still goes straight to the provider.
        assert fetch_models(provider_double)["object"] == "list"
        assert proxy.connections == 1
    assert provider_double.hits("/v1/models") == 1


def test_the_client_reads_nothing_from_the_environment():
    # Given the guarded transport, httpx reads no proxy variables even when it trusts the
    # environment (the test above passes either way); this pins the setting itself.
    with local_client() as client:
        assert client._http.trust_env is False


@pytest.mark.parametrize(("http", "core"), [(httpx, httpcore), (httpx2, httpcore2)])
def test_both_transports_hand_their_pool_the_request_in_its_raw_parts(http, core):
    request = http.Request("POST", "http://[::1]:8080/v1/a%20b?q=1", content=b"{}")
    sent = guarded_core_request(request, core)
    assert isinstance(sent, core.Request)
    assert (sent.method, sent.url.scheme, sent.url.host, sent.url.port, sent.url.target) == (
        b"POST",
        b"http",
        b"::1",
        8080,
        b"/v1/a%20b?q=1",
    )
    assert (b"Content-Length", b"2") in sent.headers


@pytest.mark.parametrize(("http", "core"), [(httpx, httpcore), (httpx2, httpcore2)])
def test_both_transports_refuse_a_url_with_credentials_before_the_pool(http, core):
    with pytest.raises(ProviderError) as caught:
        guarded_core_request(http.Request("GET", "http://user:pw@127.0.0.1/v1/models"), core)
    assert caught.value.kind == "address_refused"


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_redirects_are_errors_and_never_followed(provider_double, status):
    provider_double.redirect("/v1/models", to="/v1/landing", status=status)
    with pytest.raises(ProviderError) as caught:
        fetch_models(provider_double)
    assert (caught.value.kind, caught.value.status) == ("redirect", status)
    assert provider_double.hits("/v1/landing") == 0


def test_a_body_over_the_declared_cap_is_refused(provider_double):
    provider_double.reply(path="/v1/models", body=b"[" + b" " * 4096 + b"]")
    with pytest.raises(ProviderError) as caught:
        fetch_models(provider_double, max_response_bytes=1024)
    assert caught.value.kind == "too_large"
    assert caught.value.status == 200


def test_a_body_without_length_is_cut_off_while_streaming(provider_double):
    provider_double.reply(
        path="/v1/models", body=b"[" + b" " * (4 * 1024 * 1024) + b"]", content_length=False
    )
    with pytest.raises(ProviderError) as caught:
        fetch_models(provider_double, max_response_bytes=64 * 1024)
    assert caught.value.kind == "too_large"


def test_the_default_cap_is_eight_mebibytes(provider_double):
    provider_double.reply(path="/v1/models", body=b"[" + b" " * (8 * 1024 * 1024) + b"]")
    with pytest.raises(ProviderError) as caught:
        fetch_models(provider_double)
    assert caught.value.kind == "too_large"
    provider_double.reply(path="/v1/models", body=b"[" + b" " * (7 * 1024 * 1024) + b"]")
    assert fetch_models(provider_double) == []


def test_a_slow_provider_times_out(provider_double):
    provider_double.reply(path="/v1/models", json={"data": []}, delay=3)
    with pytest.raises(ProviderError) as caught:
        fetch_models(provider_double, read_timeout=0.2)
    assert caught.value.kind == "timeout"


def test_a_refused_connection_is_a_network_error():
    with socket.socket() as placeholder:
        placeholder.bind(("127.0.0.1", 0))
        port = placeholder.getsockname()[1]
    with local_client() as client, pytest.raises(ProviderError) as caught:
        client.get_json(f"http://127.0.0.1:{port}/v1/models", api_key=KEY)
    assert caught.value.kind == "network"


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (401, {"error": {"message": "Incorrect API key", "code": "invalid_api_key"}}, "auth"),
        (403, {"error": {"message": "forbidden"}}, "auth"),
        (404, {"error": {"message": "not found"}}, "not_found"),
        (429, {"error": {"message": "Rate limit reached"}}, "rate_limit"),
        (500, {"error": {"message": "boom"}}, "upstream"),
        (503, b"<html>Service Unavailable</html>", "upstream"),
        (400, {"error": {"message": "invalid value", "code": "invalid_value"}}, "bad_request"),
        (422, {"detail": "invalid"}, "bad_request"),
    ],
)
def test_statuses_map_to_kinds(provider_double, status, body, kind):
    if isinstance(body, bytes):
        provider_double.reply(path="/v1/models", status=status, body=body)
    else:
        provider_double.reply(path="/v1/models", status=status, json=body)
    with pytest.raises(ProviderError) as caught:
        fetch_models(provider_double)
    assert (caught.value.kind, caught.value.status) == (kind, status)


def test_invalid_json_is_a_protocol_error(provider_double):
    provider_double.reply(path="/v1/models", body=b"{not json")
    with pytest.raises(ProviderError) as caught:
        fetch_models(provider_double)
    assert caught.value.kind == "protocol"


def test_nothing_of_the_key_or_the_providers_body_leaks(provider_double, caplog):
    caplog.set_level(logging.DEBUG)
    leaky = f"{PROVIDER_SECRET}: the key you sent was {KEY}"
    provider_double.reply(
        path="/v1/models",
        status=401,
        json={"error": {"message": leaky, "code": KEY}},
        headers={"X-Debug": leaky},
    )
    provider_double.reply(
        path="/v1/models",
        status=400,
        json={"error": {"message": f"maximum context length exceeded; {leaky}"}},
    )
    provider_double.reply(path="/v1/models", status=302, headers={"Location": f"/x?k={KEY}"})
    provider_double.reply(path="/v1/models", body=leaky.encode())
    errors = []
    for _ in range(4):
        with pytest.raises(ProviderError) as caught:
            fetch_models(provider_double)
        errors.append(caught.value)
    assert [error.kind for error in errors] == ["auth", "context_length", "redirect", "protocol"]
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in provider_double.requests)
    texts = [str(e) for e in errors] + [repr(e) for e in errors] + [str(e.args) for e in errors]
    texts += [record.getMessage() for record in caplog.records]
    texts += [str(record.args) for record in caplog.records]
    assert caplog.records, "the failures should have been logged"
    for text in texts:
        assert KEY not in text
        assert PROVIDER_SECRET not in text
    assert all(error.__cause__ is None for error in errors)


def test_a_key_that_cannot_be_a_header_is_refused_without_echo(provider_double):
    bad_key = "sk-abc\r\nX-Injected: 1"
    with local_client() as client, pytest.raises(ProviderError) as caught:
        client.get_json(provider_double.base_url + "/models", api_key=bad_key)
    assert caught.value.kind == "bad_request"
    assert "sk-abc" not in str(caught.value) and "sk-abc" not in repr(caught.value)
    assert provider_double.requests == []


def test_no_key_sends_no_authorization_header(provider_double):
    with local_client() as client:
        client.get_json(provider_double.base_url + "/models", api_key="")
    assert "authorization" not in provider_double.requests[-1].headers


@pytest.mark.parametrize(
    "url",
    [
        "ftp://127.0.0.1/v1/models",
        "file:///etc/passwd",
        "http://user:pass@127.0.0.1/v1/models",
        "http://token@127.0.0.1/v1/models",
        "/v1/models",
        "http:///v1/models",
        # Invalid IDNA A-labels: the host cannot be decoded.
        "http://xn--a.com/v1/models",
        "http://xn--/v1/models",
        # Host names that are not valid DNS names.
        "http://exa mple.com/v1/models",
        "http://-bad-.com/v1/models",
        "http://a..b/v1/models",
    ],
)
def test_only_plain_http_and_https_urls_are_called(url):
    with local_client() as client, pytest.raises(ProviderError) as caught:
        client.get_json(url, api_key=KEY)
    assert caught.value.kind == "address_refused"


def test_provider_errors_are_gateway_errors_with_fixed_kinds():
    error = ProviderError("rate_limit", status=429, retry_after=1.5)
    assert isinstance(error, GatewayError)
    assert error.retryable and error.retry_after == 1.5
    assert str(error) == (
        "The provider is limiting the request rate; it asks to retry after 2 s. (HTTP 429)"
    )
    assert set(KINDS) >= {"auth", "rate_limit", "context_length", "too_large", "address_refused"}
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.kind, copy.status, copy.retry_after, str(copy)) == (
        "rate_limit",
        429,
        1.5,
        str(error),
    )
    with pytest.raises(ValueError):
        ProviderError("teapot")
