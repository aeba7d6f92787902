"""Check and normalise provider base URLs, and recognise the providers' official endpoints.

Host rule (`checked_url`, the one check for a URL that is saved or called): a host is an IP
literal or a DNS name whose dot-separated labels, in their ASCII (IDNA) form, are 1 to 63
letters, digits or hyphens, neither starting nor ending with a hyphen, at most 253 characters in
all (one final dot allowed). Spaces, underscores, empty labels and invalid IDNA labels are
refused. A name with non-ASCII letters is allowed, and shown with its punycode form beside it
(`punycode_url`), since a letter of another script can pass for a real host's.
"""

from __future__ import annotations

import re

import httpx

from agentloom.providers._errors import ProviderError

__all__ = [
    "OFFICIAL_ENDPOINTS",
    "PROVIDERS",
    "checked_url",
    "endpoint_url",
    "is_official_endpoint",
    "normalise_base_url",
    "origin_url",
    "punycode_url",
]

PROVIDERS = ("openai", "deepseek", "openai_compatible", "ollama", "lmstudio", "local")

# The only base URLs whose models may take windows from the official manifest. A proxy or a
# self-hosted server may serve a model under the same ID with another window, so it never does.
OFFICIAL_ENDPOINTS = {
    "openai": frozenset({"https://api.openai.com/v1"}),
    "deepseek": frozenset({"https://api.deepseek.com", "https://api.deepseek.com/v1"}),
}

_DEFAULT_PORTS = {"http": 80, "https": 443}
_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", re.IGNORECASE)
_MAX_HOST_CHARS = 253


def checked_url(url: str | httpx.URL) -> httpx.URL:
    """Return `url` parsed, or raise `ProviderError("address_refused")` if it may not be called.

    Only absolute http and https URLs with a host and without user information are allowed.
    """
    try:
        parsed = url if isinstance(url, httpx.URL) else httpx.URL(str(url).strip())
        # The host is decoded from IDNA only when read: an invalid A-label such as `xn--a`
        # fails here (an `idna` error, a ValueError), not later in a caller.
        parsed.host  # noqa: B018
    except (httpx.InvalidURL, TypeError, ValueError):
        raise ProviderError("address_refused", "The provider URL is not a valid URL.") from None
    if parsed.scheme not in _DEFAULT_PORTS:
        raise ProviderError("address_refused", "The provider URL must use http or https.")
    if parsed.userinfo:
        raise ProviderError(
            "address_refused", "The provider URL must not contain a user name or password."
        )
    if not parsed.host:
        raise ProviderError("address_refused", "The provider URL has no host.")
    _check_host_name(parsed)
    return parsed


def _check_host_name(parsed: httpx.URL) -> None:
    if ":" in parsed.host:
        return  # An IPv6 literal, already checked by the parser.
    name = parsed.raw_host.decode("ascii")
    name = name[:-1] if name.endswith(".") else name
    if len(name) > _MAX_HOST_CHARS or not all(_LABEL.fullmatch(part) for part in name.split(".")):
        raise ProviderError(
            "address_refused",
            "The provider host name is not valid: each dot-separated part is 1 to 63 letters, "
            "digits or hyphens, not starting or ending with a hyphen (no spaces, underscores or "
            "empty parts).",
        )


def punycode_url(url: str) -> str | None:
    """Return `url` with its host in punycode when the host has non-ASCII letters, else None."""
    try:
        parsed = httpx.URL(url)
        ascii_host = parsed.raw_host.decode("ascii")
    except (httpx.InvalidURL, TypeError, ValueError):
        return None
    if ascii_host == parsed.host:
        return None
    return str(parsed.copy_with(host=ascii_host))


def normalise_base_url(base_url: str) -> str:
    """Return `base_url` checked, with scheme and host lower-cased, default port and final `/` gone.

    A query or fragment is refused: request paths are appended to the base URL.
    """
    parsed = checked_url(base_url)
    if parsed.query or parsed.fragment:
        raise ProviderError(
            "address_refused", "The provider base URL must not have a query or fragment."
        )
    host = parsed.host
    if ":" in host:
        host = f"[{host}]"
    port = "" if parsed.port in (None, _DEFAULT_PORTS[parsed.scheme]) else f":{parsed.port}"
    path = parsed.path.rstrip("/")
    return f"{parsed.scheme}://{host}{port}{path}"


def origin_url(base_url: str, path: str) -> str:
    """Return the URL of `path` at the origin of `base_url`: its scheme, host and port only.

    The server's own routes (`/props`, `/tokenize`, `/api/v0/models`) live at its root, beside
    the OpenAI-compatible `/v1`; whatever path the base URL has is dropped, never a host changed.
    """
    parsed = httpx.URL(normalise_base_url(base_url))
    host = f"[{parsed.host}]" if ":" in parsed.host else parsed.host
    port = "" if parsed.port is None else f":{parsed.port}"
    return f"{parsed.scheme}://{host}{port}/" + path.lstrip("/")


def endpoint_url(base_url: str, path: str) -> str:
    """Return the URL of `path` (such as `/models`) under `base_url`."""
    return normalise_base_url(base_url) + "/" + path.lstrip("/")


def is_official_endpoint(provider: str, base_url: str) -> bool:
    """Return whether `base_url` is `provider`'s own public API endpoint."""
    official = OFFICIAL_ENDPOINTS.get(provider)
    if not official:
        return False
    try:
        return normalise_base_url(base_url) in official
    except ProviderError:
        return False
