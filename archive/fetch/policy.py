"""Which addresses an outbound fetch may reach.

Every address a name resolves to is classified: loopback, private (RFC 1918, unique local),
link-local, shared/CGNAT, reserved, documentation, multicast and cloud metadata addresses are
refused by default, and so is an IPv6 form that embeds one of them (mapped, NAT64, 6to4).
``AMBER_FETCH_ALLOW`` (:class:`AllowList`) opens hostnames (exact, case-insensitive) or
CIDRs / single addresses, each on the ports it names (``host:8080``, ``[fd00::1]:8443``,
``10.0.0.0/8:*``) or, without a port, on 80 and 443 only: naming an intranet web server
must not open its database port too. Cloud metadata addresses open only when listed as that
exact address: allowing ``169.254.0.0/16`` or an internal hostname must not quietly expose
instance credentials.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from archive.exceptions import FetchError, FetchRefused

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def _net(cidr: str) -> IPNetwork:
    return ipaddress.ip_network(cidr)


_METADATA = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean, ...
        "fd00:ec2::254",  # AWS IMDS over IPv6
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud (legacy)
    )
)

# Most specific first: the first match names the reason.
_BLOCKED: tuple[tuple[IPNetwork, str], ...] = tuple(
    (_net(cidr), reason)
    for cidr, reason in (
        ("0.0.0.0/32", "unspecified address"),
        ("0.0.0.0/8", "'this network' (reserved; reaches the local host on Linux)"),
        ("127.0.0.0/8", "loopback"),
        ("10.0.0.0/8", "private network (RFC 1918)"),
        ("172.16.0.0/12", "private network (RFC 1918)"),
        ("192.168.0.0/16", "private network (RFC 1918)"),
        ("100.64.0.0/10", "shared/CGNAT address space (RFC 6598)"),
        ("169.254.0.0/16", "link-local"),
        ("192.0.0.0/24", "IETF protocol assignments (reserved)"),
        ("192.0.2.0/24", "documentation range (reserved)"),
        ("198.51.100.0/24", "documentation range (reserved)"),
        ("203.0.113.0/24", "documentation range (reserved)"),
        ("192.88.99.0/24", "6to4 relay anycast (deprecated)"),
        ("198.18.0.0/15", "benchmarking range (reserved)"),
        ("224.0.0.0/4", "multicast"),
        ("255.255.255.255/32", "broadcast"),
        ("240.0.0.0/4", "reserved (class E)"),
        ("::/128", "unspecified address"),
        ("::1/128", "loopback"),
        ("::/96", "IPv4-compatible IPv6 (deprecated)"),
        ("64:ff9b:1::/48", "local-use NAT64 (RFC 8215)"),
        ("100::/64", "discard-only (reserved)"),
        ("2001::/32", "Teredo tunnel (hides an IPv4 address)"),
        ("2001:db8::/32", "documentation range (reserved)"),
        ("2001::/23", "IETF protocol assignments (reserved)"),
        ("3fff::/20", "documentation range (reserved)"),
        ("fc00::/7", "private network (unique local, fc00::/7)"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local (deprecated)"),
        ("ff00::/8", "multicast"),
    )
)

_GLOBAL_UNICAST_V6 = _net("2000::/3")
_NAT64 = _net("64:ff9b::/96")


def _plain(ip: IPAddress) -> IPAddress:
    """``ip`` without an IPv6 scope id, so set membership and equality work."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.scope_id:
        return ipaddress.IPv6Address(int(ip))
    return ip


def _embedded_v4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 form really reaches (mapped, NAT64, 6to4), if any."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip.sixtofour


def _effective(ip: IPAddress) -> IPAddress:
    return _plain(_embedded_v4(ip) or ip)


def parse_ip(text: str) -> IPAddress | None:
    """``text`` as an IP address (brackets allowed), or ``None`` if it is not one."""
    try:
        return ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None


def is_metadata(address: str | IPAddress) -> bool:
    ip = parse_ip(address) if isinstance(address, str) else address
    return ip is not None and _effective(ip) in _METADATA


def blocked_reason(address: str | IPAddress) -> str | None:
    """Why ``address`` must not be fetched by default, or ``None`` if it is public."""
    ip = parse_ip(address) if isinstance(address, str) else address
    if ip is None:
        raise ValueError(f"not an IP address: {address!r}")
    ip = _plain(ip)
    inner = _embedded_v4(ip)
    if inner is not None:
        reason = blocked_reason(inner)
        return None if reason is None else f"{reason}, embedded in IPv6 {ip}"
    if ip in _METADATA:
        return "cloud metadata endpoint"
    for network, reason in _BLOCKED:
        if ip.version == network.version and ip in network:
            return reason
    if isinstance(ip, ipaddress.IPv6Address) and ip not in _GLOBAL_UNICAST_V6:
        return "reserved (outside IPv6 global unicast 2000::/3)"
    if not ip.is_global:  # belt and braces: whatever the stdlib also knows is not public
        return "not globally routable"
    return None


def _normalize_host(host: str) -> str:
    return host.strip("[]").rstrip(".").lower()


DEFAULT_PORTS = frozenset({80, 443})  # what an entry without a port opens: http and https

_HOSTNAME = re.compile(
    r"(?i)[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?)*\.?"
)


@dataclass(frozen=True)
class AllowEntry:
    """One ``AMBER_FETCH_ALLOW`` entry: a hostname or a network, and the ports it opens.

    ``ports`` is ``None`` for ``:*`` (every port); an entry without a port opens
    :data:`DEFAULT_PORTS` only, so naming a host never exposes its other services.
    """

    host: str | None
    network: IPNetwork | None
    ports: frozenset[int] | None

    def opens(self, port: int) -> bool:
        return self.ports is None or port in self.ports


def parse_allow_entry(text: str) -> AllowEntry:
    """``host``, ``host:port``, ``host:*``, an address or CIDR likewise (IPv6 in brackets
    when a port follows: ``[fd00::1]:8080``, ``[fd00::/8]:*``). :class:`ValueError` if
    malformed."""
    entry = text.strip()
    target, port_text = _split_port(entry)
    ports = _parse_ports(port_text, entry)
    try:
        return AllowEntry(None, ipaddress.ip_network(target, strict=False), ports)
    except ValueError:
        pass
    if "/" in target or ":" in target or not _HOSTNAME.fullmatch(target):
        raise ValueError(f"AMBER_FETCH_ALLOW entry {entry!r} is not a host, address or CIDR")
    return AllowEntry(_normalize_host(target), None, ports)


def _split_port(entry: str) -> tuple[str, str | None]:
    if entry.startswith("["):
        inner, bracket, rest = entry[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(f"AMBER_FETCH_ALLOW entry {entry!r}: write [IPv6]:port")
        return inner, rest[1:] if rest else None
    if entry.count(":") > 1:  # a bare IPv6 address or CIDR: no port without brackets
        return entry, None
    target, colon, port = entry.partition(":")
    return target, port if colon else None


def _parse_ports(port: str | None, entry: str) -> frozenset[int] | None:
    if port is None:
        return DEFAULT_PORTS
    if port == "*":
        return None
    if not port.isascii() or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"AMBER_FETCH_ALLOW entry {entry!r}: the port must be 1-65535 or *")
    return frozenset({int(port)})


@dataclass(frozen=True)
class AllowList:
    """``AMBER_FETCH_ALLOW``: hostnames, and CIDRs or single addresses, that may be private,
    each on the ports its entry names (default: 80 and 443)."""

    entries: tuple[AllowEntry, ...] = ()

    @classmethod
    def from_entries(cls, entries: Iterable[str]) -> AllowList:
        return cls(tuple(parse_allow_entry(e) for e in entries if e.strip()))

    def _covers(self, ip: IPAddress, port: int, *, exact: bool = False) -> bool:
        candidates = {_plain(ip), _effective(ip)}
        return any(
            c.version == entry.network.version
            and c in entry.network
            and (not exact or entry.network.num_addresses == 1)
            for entry in self.entries
            if entry.network is not None and entry.opens(port)
            for c in candidates
        )

    def _names(self, host: str, port: int) -> bool:
        name = _normalize_host(host)
        return any(e.host == name and e.opens(port) for e in self.entries)

    def permits(self, host: str, ip: IPAddress, port: int) -> bool:
        if is_metadata(ip):  # only an entry naming this very address opens it
            return self._covers(ip, port, exact=True)
        return self._names(host, port) or self._covers(ip, port)

    def vet(self, host: str, port: int, addresses: Sequence[IPAddress]) -> list[IPAddress]:
        """All of ``addresses`` if each is public or allowed on ``port``; else
        :class:`FetchRefused`.

        One bad answer refuses the whole name: a name that mixes public and private
        addresses is exactly what a rebinding attack looks like.
        """
        if not addresses:
            raise FetchError(f"{host!r} did not resolve to any address", host=host)
        for ip in addresses:
            reason = blocked_reason(ip)
            if reason is not None and not self.permits(host, ip, port):
                raise FetchRefused(
                    _refusal(host, ip, port, reason), host=host, address=str(ip), reason=reason
                )
        return list(addresses)


def _refusal(host: str, ip: IPAddress, port: int, reason: str) -> str:
    where = f"{host!r}" if parse_ip(host) is not None else f"{host!r} (resolves to {ip})"
    if is_metadata(ip):
        hint = "metadata endpoints open only when AMBER_FETCH_ALLOW lists that exact address"
    else:
        hint = (
            f"add the host or a CIDR with port {port} to AMBER_FETCH_ALLOW if this is intended"
            " (an entry without a port opens 80 and 443 only)"
        )
    return f"refused to fetch {where} port {port}: {reason}; {hint}"
