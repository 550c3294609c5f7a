"""HTTP basic authentication against bcrypt hashes, with successful checks cached."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import threading
from collections import OrderedDict
from collections.abc import Mapping

import bcrypt

# A hash of a random password: unknown users pay the same bcrypt cost as known ones.
_DUMMY = b"$2b$10$" + b"N9qo8uLOickgx2ZMRZoMye" + b"IjZAgcfl7p92ldGxad68LJZdL17lhWy"
CACHE_SIZE = 64


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

    A successful check is remembered (keyed on a SHA-256 of user and password, never the
    password itself), so a scraper with the right credentials pays bcrypt once, not per
    scrape. Failures are not cached: a wrong password always costs a full bcrypt.
    """

    def __init__(self, users: Mapping[str, bytes]) -> None:
        self.users = dict(users)
        self._ok: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        """Return whether any user is configured (else everyone is let in)."""
        return bool(self.users)

    def _key(self, user: str, password: bytes) -> bytes:
        return hashlib.sha256(user.encode() + b"\0" + password).digest()

    def cached(self, user: str, password: bytes) -> bool:
        """Return True when these credentials were verified before (cheap)."""
        key = self._key(user, password)
        with self._lock:
            for k in self._ok:
                if hmac.compare_digest(k, key):
                    self._ok.move_to_end(k)
                    return True
        return False

    def verify(self, user: str, password: bytes) -> bool:
        """Return whether the credentials are right (runs bcrypt unless cached)."""
        if self.cached(user, password):
            return True
        hashed = self.users.get(user)
        try:
            ok = bcrypt.checkpw(password, hashed or _DUMMY) and hashed is not None
        except ValueError:  # over bcrypt's 72-byte limit, or a hash bcrypt rejects
            ok = False
        if ok:
            with self._lock:
                self._ok[self._key(user, password)] = None
                while len(self._ok) > CACHE_SIZE:
                    self._ok.popitem(last=False)
        return ok
