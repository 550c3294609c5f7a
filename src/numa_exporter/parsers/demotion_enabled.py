"""Parser for ``/sys/kernel/mm/numa/demotion_enabled`` (5.18+; ``true`` or ``false``)."""

from __future__ import annotations


def parse_demotion_enabled(data: bytes) -> bool | None:
    """Return whether reclaim demotes pages to a lower memory tier, or None if malformed.

    The kernel prints exactly ``true\\n`` or ``false\\n`` (``demotion_enabled_show``); it
    accepts other spellings on write only.
    """
    text = data[:-1] if data.endswith(b"\n") else data
    if text == b"true":
        return True
    if text == b"false":
        return False
    return None
