"""HTTP basic authentication against bcrypt hashes, with the outcome of checks cached."""

from __future__ import annotations

import base64
import binascii
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Mapping

import bcrypt

# A hash of a random password: unknown users pay the same bcrypt cost as known ones.
_DUMMY = b"$2b$10$" + b"N9qo8uLOickgx2ZMRZoMye" + b"IjZAgcfl7p92ldGxad68LJZdL17lhWy"
CACHE_SIZE = 64  # right credentials remembered
FAILURE_CACHE_SIZE = 256  # wrong ones


def parse_basic(header: str | None) -> tuple[str, bytes] | None:
    """Return (user, password) from an ``Authorization: Basic ...`` value, else None."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic" or len(token) > 4096:
        return None
    try:
        raw = base64.b64decode(token.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, sep, password = raw.partition(b":")
    if not sep:
        return None
    try:
        return user.decode("utf-8"), password
    except UnicodeDecodeError:
        return None


class BasicAuth:
    """Checks credentials against ``users`` (user -> bcrypt hash).

    Both outcomes are remembered, keyed on a SHA-256 of user and password (never the
    password itself), in two separate bounded caches: a scraper with the right credentials
    pays bcrypt once, not per scrape, and a client repeating a wrong password pays it once
    too. Failures cannot evict successes, so a flood of wrong passwords never pushes the
    right one out of its cache. The hashes are fixed for the object's life (the web
    configuration is read once), so a remembered outcome stays true.
    """

    def __init__(self, users: Mapping[str, bytes]) -> None:
        self.users = dict(users)
        self._ok: OrderedDict[bytes, None] = OrderedDict()
        self._bad: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()
        self.checks = 0  # bcrypt checks run (for tests and the soak)

    @property
    def enabled(self) -> bool:
        """Return whether any user is configured (else everyone is let in)."""
        return bool(self.users)

    @staticmethod
    def _key(user: str, password: bytes) -> bytes:
        return hashlib.sha256(user.encode() + b"\0" + password).digest()

    def known(self, user: str, password: bytes) -> bool | None:
        """Return the remembered outcome for these credentials (True: right, False: wrong),
        None when they were never checked; cheap, never runs bcrypt."""
        key = self._key(user, password)
        with self._lock:
            for cache, outcome in ((self._ok, True), (self._bad, False)):
                if key in cache:  # a dict lookup on a digest: its timing says nothing useful
                    cache.move_to_end(key)
                    return outcome
        return None

    def cached(self, user: str, password: bytes) -> bool:
        """Return True when these credentials were verified right before (cheap)."""
        return self.known(user, password) is True

    def verify(self, user: str, password: bytes) -> bool:
        """Return whether the credentials are right (runs bcrypt unless remembered).

        Unknown users are checked against a dummy hash, so they cost the same time.
        """
        outcome = self.known(user, password)
        if outcome is not None:
            return outcome
        hashed = self.users.get(user)
        with self._lock:
            self.checks += 1
        try:
            ok = bcrypt.checkpw(password, hashed or _DUMMY) and hashed is not None
        except ValueError:  # over bcrypt's 72-byte limit, or a hash bcrypt rejects
            ok = False
        with self._lock:
            cache, size = (self._ok, CACHE_SIZE) if ok else (self._bad, FAILURE_CACHE_SIZE)
            cache[self._key(user, password)] = None
            while len(cache) > size:
                cache.popitem(last=False)
        return ok
