"""What the kubelet's three checkpoint parsers share: the file's envelope and its checksum.

``cpu_manager_state``, ``memory_manager_state`` and ``device-plugins/kubelet_internal_checkpoint``
are each one JSON object with a stored checksum (``pkg/kubelet/checkpointmanager``); the
newer CPU and Memory Manager forms wrap their data in a ``data`` string with a
``dataChecksum`` over it. This module bounds and opens the file, reads the stored checksum,
verifies the ``data`` form and says what a checksum check found, and marks a result the
kubelet would refuse. The Go decoding and the hashes themselves are ``go_json``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any, Literal, TypeVar

from numa_exporter.parsers.kubelet import go_json as gj

Checksum = Literal["verified", "absent", "mismatch", "unverifiable", ""]
REFUSED = "checksum does not match; the kubelet would refuse this checkpoint"

T = TypeVar("T")


class CheckpointResult:
    """Base of the three parsers' frozen result dataclasses: each declares ``version``
    (empty when the file did not parse), ``checksum``, ``error`` and ``error_count`` as
    fields; this adds what follows from them."""

    __slots__ = ()
    version: str
    checksum: str
    error: str
    error_count: int

    @property
    def usable(self) -> bool:
        """Return whether the assignments can be trusted (parsed, checksum not refuted)."""
        return bool(self.version) and self.checksum != "mismatch"


R = TypeVar("R", bound=CheckpointResult)


def parse_file(data: bytes, max_bytes: int, parse: Callable[[gj.Obj], T],
               failed: Callable[[str], T]) -> T:
    """Return ``parse`` of the file's top-level JSON object, or ``failed(message)`` when the
    file is larger than ``max_bytes``, not JSON, not an object, or does not decode into the
    kubelet's types (``GoJSONError``). Never raises for bad input."""
    if len(data) > max_bytes:
        return failed(f"larger than {max_bytes} bytes")
    try:
        top = gj.loads(data)
        if not isinstance(top, gj.Obj):
            return failed("not a JSON object")
        return parse(top)
    except gj.GoJSONError as err:
        return failed(str(err))


def stored_checksum(value: Any) -> int:
    """Return a stored checksum field's value, or -1 (matches no hash) when it is not a
    non-negative integer."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        return -1
    return value


def has_data_field(top: gj.Obj) -> bool:
    """Return whether the file is in the dual-checksum form (``data`` / ``dataChecksum``)."""
    return gj.has(top, "data") or gj.has(top, "dataChecksum")


def data_field(top: gj.Obj) -> tuple[str, Checksum] | None:
    """Return the dual-checksum form's ``data`` text and ``verified`` or ``mismatch`` for its
    ``dataChecksum``; None when ``data`` is not a string."""
    data = gj.get(top, "data")
    if not isinstance(data, str):
        return None
    stored = stored_checksum(gj.get(top, "dataChecksum"))
    return data, "verified" if gj.checksum_of_string(data) == stored else "mismatch"


def struct_hash_text(t: gj.Struct, value: dict[str, Any], name: str) -> str:
    """Return the text the kubelet hashed for a whole-struct checksum: go-spew of ``&value``
    with ``Checksum`` zeroed, the type printed as ``name`` in ``t``'s package (kubelets
    have named the same struct differently)."""
    text = gj.spew(t, {**value, "Checksum": 0}, pointer=True)
    package = t.go.rsplit(".", 1)[0]
    return text.replace(f"(*{t.go})", f"(*{package}.{name})", 1)


def verdict(candidates: Iterable[str], stored: int, unknown: bool, *,
            zero_absent: bool) -> Checksum:
    """Return what the stored checksum says of the file.

    ``absent`` when it is zero and ``zero_absent`` (the kubelet accepts a zero checksum for
    compatibility with its old file backend), ``verified`` when any of the ways a kubelet
    hashed the file (``candidates``, go-spew texts) gives ``stored``, else ``unverifiable``
    when the file had keys this parser does not know (``unknown``), else ``mismatch``.
    """
    if stored == 0 and zero_absent:
        return "absent"
    if any(gj.checksum_of(text) == stored for text in candidates):
        return "verified"
    return "unverifiable" if unknown else "mismatch"


def refuse_on_mismatch(result: R, message: str = REFUSED) -> R:
    """Return ``result`` with ``message`` as its error and one more error counted when its
    checksum is ``mismatch`` (the kubelet would refuse the file); else ``result`` as is."""
    if result.checksum != "mismatch":
        return result
    return replace(result, error=message,  # type: ignore[type-var]
                   error_count=result.error_count + 1)
