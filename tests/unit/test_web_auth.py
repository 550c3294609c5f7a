"""Basic auth: header parsing, bcrypt ($2y$ as htpasswd writes it) and the success cache."""

from __future__ import annotations

import base64
import shutil
import subprocess

import bcrypt
import pytest

from numa_exporter.web import auth
from numa_exporter.web.auth import BasicAuth, parse_basic


def _hdr(raw: bytes) -> str:
    return "Basic " + base64.b64encode(raw).decode()


def test_parse_basic() -> None:
    assert parse_basic(_hdr(b"prom:pa:ss")) == ("prom", b"pa:ss")
    assert parse_basic("basic " + base64.b64encode(b"u:").decode()) == ("u", b"")
    for bad in (None, "", "Bearer x", "Basic !!!", _hdr(b"nocolon"), _hdr(b"\xff:x"),
                "Basic " + "A" * 5000):
        assert parse_basic(bad) is None


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    calls: list[bytes] = []
    real = bcrypt.checkpw

    def checkpw(pw: bytes, hashed: bytes) -> bool:
        calls.append(pw)
        return real(pw, hashed)

    monkeypatch.setattr(auth.bcrypt, "checkpw", checkpw)
    return calls


def test_both_outcomes_are_cached(counted: list[bytes]) -> None:
    h = bcrypt.hashpw(b"right", bcrypt.gensalt(4)).replace(b"$2b$", b"$2y$", 1)
    a = BasicAuth({"prom": h})
    assert a.known("prom", b"right") is None and not a.cached("prom", b"right")
    for _ in range(5):
        assert a.verify("prom", b"right")
    assert counted == [b"right"]
    assert a.cached("prom", b"right") and a.known("prom", b"right") is True
    for _ in range(3):
        assert not a.verify("prom", b"wrong")
    assert counted.count(b"wrong") == 1, "a repeated wrong password costs one bcrypt"
    assert a.known("prom", b"wrong") is False and not a.cached("prom", b"wrong")
    assert not a.verify("other", b"right"), "a password is bound to its user"
    assert not a.cached("other", b"right")
    assert a.checks == len(counted) == 3


def test_wrong_passwords_never_evict_the_right_one(counted: list[bytes]) -> None:
    """exporter-toolkit keeps both outcomes in one cache of 100 with random eviction, so a
    flood of distinct wrong passwords pushes the right one out; here they are apart."""
    a = BasicAuth({"prom": bcrypt.hashpw(b"right", bcrypt.gensalt(4))})
    assert a.verify("prom", b"right")
    for i in range(3 * (auth.CACHE_SIZE + auth.FAILURE_CACHE_SIZE)):
        a.verify("prom", b"wrong%d" % i)
    assert a.cached("prom", b"right")
    assert a.known("prom", b"wrong0") is None, "the failure cache is bounded"


def test_unknown_user_and_long_password_fail() -> None:
    a = BasicAuth({"prom": bcrypt.hashpw(b"x", bcrypt.gensalt(4))})
    assert not a.verify("nobody", b"x")
    assert not a.verify("prom", b"x" * 100)


def test_dummy_hash_is_a_valid_bcrypt_hash() -> None:
    assert bcrypt.checkpw(b"not the password", auth._DUMMY) is False


def test_real_htpasswd_hash() -> None:
    htpasswd = shutil.which("htpasswd")
    if htpasswd is None:
        pytest.skip("htpasswd not installed (Debian package apache2-utils; tools/test.sh "
                    "installs it)")
    out = subprocess.run([htpasswd, "-nbBC", "5", "prom", "s3cret"], capture_output=True,
                         text=True, check=True, timeout=30).stdout.strip()
    user, _, hashed = out.partition(":")
    assert hashed.startswith("$2y$05$")
    a = BasicAuth({user: hashed.encode()})
    assert a.verify("prom", b"s3cret")
    assert not a.verify("prom", b"s3cret!")
