"""Fixtures of the in-process web server tests (their shared classes in ``web_harness.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import bcrypt
import pytest
from tests.unit.web_harness import Gate, Snap

from numa_exporter.web import auth
from numa_exporter.web.config import WebConfig, WebSettings
from numa_exporter.web.server import WebServer, serve


@pytest.fixture
def gated_bcrypt(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Gate, list[bytes]]]:
    """bcrypt that records each password it checks and waits for the gate first."""
    gate = Gate()
    order: list[bytes] = []
    real = bcrypt.checkpw

    def checkpw(password: bytes, hashed: bytes) -> bool:
        order.append(password)
        gate.wait()
        return real(password, hashed)

    monkeypatch.setattr(auth.bcrypt, "checkpw", checkpw)
    yield gate, order
    gate.let()


@pytest.fixture
def auth_server() -> Iterator[WebServer]:
    """A server on a free loopback port with one user, ``prom`` / ``right``."""
    users = {"prom": bcrypt.hashpw(b"right", bcrypt.gensalt(4))}
    srv = serve(WebSettings(host="127.0.0.1", port=0, config=WebConfig(users=users)), Snap(),
                lambda: None, None)
    yield srv
    srv.shutdown()
