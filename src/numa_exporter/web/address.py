"""Listen addresses and the telemetry path: parsed and checked at start, bound to a socket."""

from __future__ import annotations

import errno
import ipaddress
import re
import socket

# listen() clamps the backlog to net.core.somaxconn; asking for more costs nothing.
BACKLOG = 4096

_PORT = re.compile(r"[0-9]{1,5}", re.ASCII)
# RFC 3986 path characters: unreserved, percent-encoded, sub-delims, ':', '@' and '/'.
_PATH = re.compile(r"/(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/]|%[0-9A-Fa-f]{2})*", re.ASCII)


def parse_listen_address(text: str) -> tuple[str, int]:
    """Return (host, port) for ``:10061``, ``127.0.0.1:10061`` or ``[::1]:10061``.

    The host is ``""`` for every address. The port must be ASCII digits in 0-65535.
    Raises ValueError for anything else.
    """
    bad = ValueError(f"not a listen address: {text!r} (examples: :10061, 127.0.0.1:10061, "
                     "[::1]:10061)")
    host, sep, port_s = text.rpartition(":")
    if not sep or not _PORT.fullmatch(port_s) or int(port_s) > 65535:
        raise bad
    if host.startswith("["):
        if not host.endswith("]"):
            raise bad
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise bad from None
    elif ":" in host or "[" in host or "]" in host or (
            host and not re.fullmatch(r"[A-Za-z0-9.\-]{1,253}", host, re.ASCII)):
        raise bad
    return host, int(port_s)


def check_telemetry_path(path: str) -> str:
    """Return ``path`` when it is a usable telemetry path; raise ValueError otherwise.

    It must start with ``/``, not be ``/`` and hold only URL path characters (no query,
    fragment, spaces or control characters).
    """
    if path == "/" or not _PATH.fullmatch(path):
        raise ValueError(f"not a URL path: {path!r} (must start with '/', not be '/', and have "
                         "no '?', '#', spaces or other characters outside a URL path)")
    return path


def _is_ipv4(host: str) -> bool:
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        return False
    return True


def bind(host: str, port: int) -> socket.socket:
    """Return a listening TCP socket for (host, port) with a real backlog.

    An empty host binds every address: an IPv6 socket with IPV6_V6ONLY off (dual stack),
    or IPv4 only where the host has no IPv6. Raises OSError when the address cannot be bound.
    """
    if host == "":
        if socket.has_ipv6:
            try:
                return _listen(socket.AF_INET6, ("::", port), dual=True)
            except OSError as exc:
                if exc.errno not in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL,
                                     errno.EPROTONOSUPPORT):
                    raise
        return _listen(socket.AF_INET, ("0.0.0.0", port))
    if _is_ipv4(host):
        return _listen(socket.AF_INET, (host, port))
    if ":" in host:
        return _listen(socket.AF_INET6, (host, port, 0, 0))
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, addr = infos[0]
    return _listen(family, (str(addr[0]), int(addr[1])))


def _listen(family: int, addr: tuple[str, int] | tuple[str, int, int, int],
            dual: bool = False) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0 if dual else 1)
        sock.bind(addr)
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock
