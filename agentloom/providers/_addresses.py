"""Decide which hosts and addresses a provider call may connect to.

A base URL is typed by an administrator, so it may point at the machine's own services or at a
cloud metadata endpoint that hands out credentials. Names are resolved once, every address is
checked, and the caller connects only to addresses that passed.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Iterable

from agentloom.providers._errors import ProviderError

__all__ = [
    "METADATA_HOSTNAMES",
    "Resolver",
    "address_refusal",
    "numeric_host",
    "resolve_checked",
    "system_resolver",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Return the IP addresses (as text) that `host` resolves to for `port`.
Resolver = Callable[[str, int], Iterable[str]]

METADATA_HOSTNAMES = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "metadata.azure.internal",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.tencentyun.com",
        "metadata.platformequinix.com",
    }
)

_V4 = ipaddress.IPv4Network
_V6 = ipaddress.IPv6Network

# Never reachable, whatever the settings: nothing a model provider can live on.
_ALWAYS_REFUSED = (
    _V4("0.0.0.0/8"),  # "this host"; 0.0.0.0 reaches the local machine on Linux
    _V4("169.254.0.0/16"),  # link-local, home of 169.254.169.254 metadata
    _V4("100.100.100.200/32"),  # Alibaba Cloud metadata
    _V4("192.0.0.192/32"),  # Oracle Cloud classic metadata
    _V4("224.0.0.0/4"),  # multicast
    _V4("240.0.0.0/4"),  # reserved, includes the 255.255.255.255 broadcast
    _V6("::/128"),
    _V6("fe80::/10"),
    _V6("ff00::/8"),
    _V6("fd00:ec2::254/128"),  # AWS metadata over IPv6
)

# Reachable only when the deployment says local model servers are expected.
_PRIVATE = (
    _V4("127.0.0.0/8"),
    _V4("10.0.0.0/8"),
    _V4("172.16.0.0/12"),
    _V4("192.168.0.0/16"),
    _V4("100.64.0.0/10"),
    _V4("192.0.0.0/24"),
    _V4("198.18.0.0/15"),
    _V6("::1/128"),
    _V6("fc00::/7"),
    _V6("fec0::/10"),
)

_NAT64 = _V6("64:ff9b::/96")
_IPV4_COMPATIBLE = _V6("::/96")
_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")


def system_resolver(host: str, port: int) -> list[str]:
    """Return the addresses `socket.getaddrinfo` gives for `host`."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def numeric_host(host: str) -> IPAddress | None:
    """Return the address `host` spells, in any form the C library would accept, or None.

    Besides the standard forms this reads what `inet_aton` reads — `2852039166`, `0xa9fea9fe`,
    `0251.0376.0251.0376`, `169.254.43518` — because a resolver turns those into addresses
    without asking DNS.
    """
    text = host.strip().lower()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if text.endswith(".") and ":" not in text:
        text = text[:-1]
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        pass
    labels = text.split(".")
    if not text or not all(_NUMERIC_LABEL.match(label) for label in labels):
        return None
    return _inet_aton(labels)


def _inet_aton(labels: list[str]) -> ipaddress.IPv4Address | None:
    if len(labels) > 4:
        return None
    values = []
    for label in labels:
        try:
            if label.startswith("0x"):
                values.append(int(label[2:] or "0", 16))
            elif len(label) > 1 and label.startswith("0"):
                values.append(int(label, 8))
            else:
                values.append(int(label, 10))
        except ValueError:
            return None
    # The last label fills every byte the earlier ones left.
    *head, last = values
    if any(value > 255 for value in head) or last >= 256 ** (4 - len(head)):
        return None
    number = 0
    for value in head:
        number = number << 8 | value
    number = number << 8 * (4 - len(head)) | last
    return ipaddress.IPv4Address(number)


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64 or (address in _IPV4_COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def address_refusal(address: IPAddress, *, allow_private_hosts: bool) -> str | None:
    """Return why a connection to `address` is refused, or None when it is allowed."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = _embedded_ipv4(address)
        if inner is not None:
            reason = address_refusal(inner, allow_private_hosts=allow_private_hosts)
            return reason and f"an IPv6 form of {reason}"
    if any(address in network for network in _ALWAYS_REFUSED):
        return "a link-local, cloud metadata, unspecified, multicast or reserved address"
    if not allow_private_hosts and any(address in network for network in _PRIVATE):
        return "a loopback or private address, which this deployment does not allow"
    return None


def resolve_checked(
    host: str, port: int, *, resolver: Resolver, allow_private_hosts: bool
) -> list[str]:
    """Resolve `host` once, refuse it unless every address is allowed, and return the addresses.

    Raise `ProviderError("address_refused")` for a refused name or address and
    `ProviderError("network")` when the name does not resolve.
    """
    name = host.strip().lower().rstrip(".")
    if name in METADATA_HOSTNAMES:
        raise ProviderError("address_refused", "The provider host is a cloud metadata service.")
    literal = numeric_host(host)
    if literal is not None:
        addresses = [literal]
    else:
        try:
            resolved = list(resolver(host, port))
        except (OSError, UnicodeError):
            raise ProviderError("network", "The provider host name does not resolve.") from None
        addresses = []
        for text in resolved:
            try:
                addresses.append(ipaddress.ip_address(str(text).split("%", 1)[0]))
            except ValueError:
                raise ProviderError(
                    "address_refused", "The provider host resolved to an unreadable address."
                ) from None
        if not addresses:
            raise ProviderError("network", "The provider host name does not resolve.")
    for address in addresses:
        reason = address_refusal(address, allow_private_hosts=allow_private_hosts)
        if reason:
            raise ProviderError("address_refused", f"The provider address is refused: {reason}.")
    # Keep the resolver's order (it encodes address preference) and drop repeats.
    return list(dict.fromkeys(str(address) for address in addresses))
