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


def test_success_is_cached_failure_is_not(counted: list[bytes]) -> None:
    h = bcrypt.hashpw(b"right", bcrypt.gensalt(4)).replace(b"$2b$", b"$2y$", 1)
    a = BasicAuth({"prom": h})
    assert not a.cached("prom", b"right")
    for _ in range(5):
        assert a.verify("prom", b"right")
    assert counted == [b"right"]
    assert a.cached("prom", b"right")
    for _ in range(3):
        assert not a.verify("prom", b"wrong")
    assert counted.count(b"wrong") == 3
    assert not a.verify("other", b"right"), "a password is bound to its user"
    assert not a.cached("other", b"right")


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
