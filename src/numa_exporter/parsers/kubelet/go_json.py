"""Kubelet checkpoint JSON decoded as Go decodes it, and the kubelet's checksum of it.

The kubelet's checkpoint files (``cpu_manager_state``, ``memory_manager_state``,
``device-plugins/kubelet_internal_checkpoint``) carry a checksum computed by
``pkg/kubelet/checkpointmanager/checksum`` (``checksum.New``): FNV-32a over
``hashutil.DeepHashObject``'s text, which is go-spew's ``%#v`` of the Go value with
``SortKeys``, ``SpewKeys``, ``DisableMethods`` (``k8s.io/utils/dump.ForHash``; go-spew
v1.1.1 ``format.go``)::

    (*state.CPUManagerCheckpoint){PolicyName:(string)static DefaultCPUSet:(string)0-1
     Entries:(map[string]map[string]string)map[<uid>:map[app:2-3]] Checksum:(checksum.Checksum)0}

(one line; strings unquoted, map keys sorted, nested types omitted, a nested pointer as
``<*>``, nil maps and slices as ``<nil>``). Reproducing it needs the Go value exactly as
``encoding/json`` leaves it: which fields exist, nil versus empty, zero values of absent
keys. This module describes the checkpoint types as small schemas (``Str``, ``Map``,
``Struct``, ...), decodes JSON into Go-shaped Python values with Go's rules (field names
matched exactly or case-insensitively, last key wins, ``null`` leaves strings and numbers
alone and makes maps, slices and pointers nil, unknown keys ignored but noted) and prints
them as go-spew does. Verified against checksums from the kubelet's own tests and from
real kubelets (see tests/unit/test_kubelet_checkpoints.py).

Everything here is pure and bounded by the input; errors are ``GoJSONError``, which the
parsers turn into a result with an error message. The two loops over every byte (FNV-32a,
and a ``[]byte`` printed as decimal numbers: a device checkpoint's ``AllocResp`` blobs are
megabytes) run in the compiled ``_kubelet_fast`` when the package was built with a C
compiler; the pure-Python ``fnv32a_py`` and ``decimal_bytes_py`` are the reference (a
property test holds them equal).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

try:
    from numa_exporter.parsers.kubelet import _kubelet_fast
except ImportError:  # built without a C compiler
    _kubelet_fast = None  # type: ignore[assignment]

COMPILED = _kubelet_fast is not None
MAX_DEPTH = 32  # the deepest checkpoint nests 7 levels; more is garbage


class GoJSONError(Exception):
    """The JSON does not decode into the Go type (Go's json.Unmarshal would fail too)."""


class Obj(list[tuple[str, Any]]):
    """A JSON object as its (key, value) pairs in file order (duplicates kept, as Go sees)."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads(data: bytes | str) -> Any:
    """Return the JSON value with objects as ``Obj``; raise GoJSONError when it is not JSON."""
    try:
        return json.loads(data, object_pairs_hook=Obj, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as err:  # UnicodeDecodeError is a ValueError
        raise GoJSONError(f"not JSON: {str(err)[:120]}") from None


def go_bytes(text: str) -> bytes:
    """Return ``text`` as the UTF-8 bytes of a Go string (lone surrogates become U+FFFD)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c
                       for c in text).encode("utf-8")


FNV_OFFSET = 0x811C9DC5
_DECIMAL = tuple(str(b) for b in range(256))


def fnv32a_py(data: bytes, h: int = FNV_OFFSET) -> int:
    """Return the 32-bit FNV-1a hash of ``data`` (Go's ``hash/fnv.New32a``), continued from
    ``h`` (the reference of the compiled one)."""
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def decimal_bytes_py(data: bytes) -> str:
    """Return the bytes of ``data`` as decimal numbers joined by spaces (the reference)."""
    return " ".join([_DECIMAL[b] for b in data])


def fnv32a(data: bytes, h: int = FNV_OFFSET) -> int:
    """Return the 32-bit FNV-1a hash of ``data`` continued from ``h``, compiled if built."""
    if _kubelet_fast is not None:
        return _kubelet_fast.fnv32a(data, h)
    return fnv32a_py(data, h)


def decimal_bytes(data: bytes) -> str:
    """Return the bytes of ``data`` as decimal numbers joined by spaces, compiled if built."""
    if _kubelet_fast is not None:
        return _kubelet_fast.decimal_bytes(data).decode("ascii")
    return decimal_bytes_py(data)


@dataclass
class Decoding:
    """State of one decode: JSON keys no schema field takes (Go ignores them)."""

    unknown_keys: set[str] = field(default_factory=set)


class GoType:
    """A Go type: how JSON decodes into it and how go-spew prints it."""

    go: str = ""

    def zero(self) -> Any:
        """Return Go's zero value of the type."""
        return None

    def decode(self, v: Any, into: Any, d: Decoding, depth: int) -> Any:
        """Return ``into`` with the JSON value ``v`` decoded into it (Go's semantics)."""
        raise NotImplementedError

    def spew(self, v: Any, out: list[str], show_type: bool) -> None:
        """Append go-spew's ``%#v`` text of ``v``; ``show_type``: print ``(T)`` first."""
        raise NotImplementedError


class Str(GoType):
    """A Go string (or a named string type such as ``v1.ResourceName``)."""

    def __init__(self, go: str = "string") -> None:
        self.go = go

    def zero(self) -> Any:
        return ""

    def decode(self, v: Any, into: Any, d: Decoding, depth: int) -> Any:
        if v is None:
            return into
        if not isinstance(v, str):
            raise GoJSONError(f"{type(v).__name__} where a {self.go} is expected")
        return v

    def spew(self, v: Any, out: list[str], show_type: bool) -> None:
        if show_type:
            out.append(f"({self.go})")
        out.append(v)


class Int(GoType):
    """A Go integer type within ``lo``..``hi`` (``int``, ``int64``, ``uint64``, ...)."""

    def __init__(self, go: str, lo: int, hi: int) -> None:
        self.go, self.lo, self.hi = go, lo, hi

    def zero(self) -> Any:
        return 0

    def decode(self, v: Any, into: Any, d: Decoding, depth: int) -> Any:
        if v is None:
            return into
        if isinstance(v, bool) or not isinstance(v, int) or not self.lo <= v <= self.hi:
            raise GoJSONError(f"{str(v)[:40]!r} is not a {self.go}")
        return v

    def spew(self, v: Any, out: list[str], show_type: bool) -> None:
        if show_type:
            out.append(f"({self.go})")
        out.append(str(v))


INT = Int("int", -(1 << 63), (1 << 63) - 1)
INT64 = Int("int64", -(1 << 63), (1 << 63) - 1)
UINT64 = Int("uint64", 0, (1 << 64) - 1)
CHECKSUM = Int("checksum.Checksum", 0, (1 << 64) - 1)


class Bytes(GoType):
    """A Go ``[]byte``: base64 in JSON, a list of decimal bytes for go-spew."""

    go = "[]uint8"

    def decode(self, v: Any, into: Any, d: Decoding, depth: int) -> Any:
        if v is None:
            return None
        if not isinstance(v, str):
            raise GoJSONError("a []byte that is not a base64 string")
        try:
            return base64.b64decode(v.replace("\r", "").replace("\n", ""), validate=True)
        except (binascii.Error, ValueError):
            raise GoJSONError("a []byte that is not valid base64") from None

    def spew(self, v: Any, out: list[str], show_type: bool) -> None:
        if show_type:
            out.append(f"({self.go})")
        out.append("<nil>" if v is None else "[" + decimal_bytes(v) + "]")


class Slice(GoType):
    """A Go slice: JSON ``null`` is nil, ``[]`` an empty slice."""

    def __init__(self, elem: GoType, go: str | None = None) -> None:
        self.elem = elem
        self.go = go or "[]" + elem.go

    def decode(self, v: Any, into: Any, d: Decoding, depth: int) -> Any:
        if v is None:
            return None
        if not isinstance(v, list) or isinstance(v, Obj):
            raise GoJSONError(f"{_kind(v)} where a {self.go} is expected")
        return [self.elem.decode(x, self.elem.zero(), d, depth + 1) for x in _depth(v, depth)]

    def spew(self, v: Any, out: list[str], show_type: bool) -> None:
        if not _typed_nil(self, v, out, show_type):
            _spew_joined(out, "[", v, lambda x: self.elem.spew(x, out, False), "]")


class Map(GoType):
    """A Go map with string or integer keys; ``null`` is nil; decoding adds to a map."""

    def __init__(self, key: GoType, value: GoType, go: str | None = None) -> None:
        self.key, self.value = key, value
        self.go = go or f"map[{key.go}]{value.go}"

    def _key(self, k: str) -> Any:
        if isinstance(self.key, Int):
            # encoding/json: strconv.ParseInt(key, 10, 64) for integer keys
            t = k[1:] if k[:1] in "+-" else k
            if not (t.isascii() and t.isdigit()) or len(t) > 20:
                raise GoJSONError(f"map key {k[:40]!r} is not a {self.key.go}")
            n = int(k)
            if not self.key.lo <= n <= self.key.hi:
                raise GoJSONError(f"map key {k[:40]!r} is not a {self.key.go}")
            return n
        return k

    def decode(self, v: Any, into: Any, d: Decoding, depth: int) -> Any:
        if v is None:
            return None
        if not isinstance(v, Obj):
            raise GoJSONError(f"{_kind(v)} where a {self.go} is expected")
        out = dict(into) if into is not None else {}
        for k, x in _depth(v, depth):
            out[self._key(k)] = self.value.decode(x, self.value.zero(), d, depth + 1)
        return out

    def spew(self, v: Any, out: list[str], show_type: bool) -> None:
        if _typed_nil(self, v, out, show_type):
            return

        def entry(k: Any) -> None:
            self.key.spew(k, out, False)
            out.append(":")
            self.value.spew(v[k], out, False)

        keys = sorted(v, key=go_bytes) if not isinstance(self.key, Int) else sorted(v)
        _spew_joined(out, "map[", keys, entry, "]")


@dataclass(frozen=True)
class Field:
    """A struct field: its Go name (printed by go-spew), JSON key and type."""

    name: str
    json: str
    type: GoType


class Struct(GoType):
    """A Go struct decoded from a JSON object by field name (exact, else case-insensitive)."""

    def __init__(self, go: str, fields: tuple[Field, ...]) -> None:
        self.go, self.fields = go, fields
        self._exact = {f.json: f for f in fields}
        self._folded = {f.json.casefold(): f for f in fields}

    def zero(self) -> Any:
        return {f.name: f.type.zero() for f in self.fields}

    def decode(self, v: Any, into: Any, d: Decoding, depth: int) -> Any:
        if v is None:
            return into
        if not isinstance(v, Obj):
            raise GoJSONError(f"{_kind(v)} where a {self.go} is expected")
        out = dict(into)
        for k, x in _depth(v, depth):
            f = self._exact.get(k) or self._folded.get(k.casefold())
            if f is None:
                d.unknown_keys.add(k[:64])
                continue
            out[f.name] = f.type.decode(x, out[f.name], d, depth + 1)
        return out

    def spew(self, v: Any, out: list[str], show_type: bool) -> None:
        if show_type:
            out.append(f"({self.go})")

        def member(f: Field) -> None:
            out.append(f.name + ":")
            f.type.spew(v[f.name], out, True)

        _spew_joined(out, "{", self.fields, member, "}")


class Ptr(GoType):
    """A Go pointer: ``null`` is nil; go-spew prints a nested one as ``<*>``."""

    def __init__(self, elem: GoType) -> None:
        self.elem = elem
        self.go = "*" + elem.go

    def decode(self, v: Any, into: Any, d: Decoding, depth: int) -> Any:
        if v is None:
            return None
        base = into if into is not None else self.elem.zero()
        return self.elem.decode(v, base, d, depth)

    def spew(self, v: Any, out: list[str], show_type: bool) -> None:
        out.append(f"({self.go})" if show_type else "<*>")
        if v is None:
            out.append("<nil>")
            return
        self.elem.spew(v, out, False)


class Custom(GoType):
    """A type with its own UnmarshalJSON: ``parse`` maps the JSON value to the Go value."""

    def __init__(self, go: str, parse: Callable[[Any], Any],
                 show: Callable[[Any], str], zero: Any = None) -> None:
        self.go, self._parse, self._show, self._zero = go, parse, show, zero

    def zero(self) -> Any:
        return self._zero

    def decode(self, v: Any, into: Any, d: Decoding, depth: int) -> Any:
        return self._parse(v)

    def spew(self, v: Any, out: list[str], show_type: bool) -> None:
        if show_type:
            out.append(f"({self.go})")
        out.append(self._show(v))


def _typed_nil(t: GoType, v: Any, out: list[str], show_type: bool) -> bool:
    """Append ``(T)`` when ``show_type``, and ``<nil>`` when ``v`` is nil; return whether
    it was (go-spew's start of a map or slice)."""
    if show_type:
        out.append(f"({t.go})")
    if v is None:
        out.append("<nil>")
        return True
    return False


def _spew_joined(out: list[str], opening: str, items: Iterable[Any],
                 one: Callable[[Any], None], closing: str) -> None:
    """Append ``opening``, each item printed by ``one`` with single spaces between, and
    ``closing`` (go-spew's lists of slice elements, map entries and struct fields)."""
    out.append(opening)
    for i, x in enumerate(items):
        if i:
            out.append(" ")
        one(x)
    out.append(closing)


def _kind(v: Any) -> str:
    if isinstance(v, Obj):
        return "an object"
    if isinstance(v, list):
        return "an array"
    return "a " + type(v).__name__


def _depth(v: list[Any], depth: int) -> Iterator[Any]:
    if depth > MAX_DEPTH:
        raise GoJSONError("nested too deeply")
    return iter(v)


def decode(t: GoType, v: Any) -> tuple[Any, Decoding]:
    """Return the Go value of JSON ``v`` decoded into a zero ``t``, and the keys ignored."""
    d = Decoding()
    return t.decode(v, t.zero(), d, 0), d


def decode_into(t: GoType, v: Any, into: Any) -> tuple[Any, Decoding]:
    """Return JSON ``v`` decoded into ``into`` (a constructor's pre-made value) and the keys
    ignored; the kubelet decodes into ``newCPUManagerCheckpointV2()`` and the like."""
    d = Decoding()
    return t.decode(v, into, d, 0), d


def spew(t: GoType, v: Any, *, pointer: bool = False) -> str:
    """Return go-spew's ``%#v`` of ``v``: of ``&v`` when ``pointer`` (``(*T){...}``)."""
    out: list[str] = []
    if pointer:
        out.append(f"(*{t.go})")
        t.spew(v, out, False)
    else:
        t.spew(v, out, True)
    return "".join(out)


def checksum_of_string(text: str) -> int:
    """Return ``checksum.New(text)`` for a Go string (the V3/V4 ``dataChecksum``)."""
    return fnv32a(b"(string)" + go_bytes(text))


def checksum_of(text: str) -> int:
    """Return the FNV-32a of a go-spew text."""
    return fnv32a(go_bytes(text))


def get(obj: Obj, name: str) -> Any:
    """Return the value Go would assign to a field with JSON key ``name`` (None if absent).

    Exact matches and case-insensitive ones alike; the last matching key in the file wins.
    """
    found: Any = None
    folded = name.casefold()
    for k, v in obj:
        if k == name or k.casefold() == folded:
            found = v
    return found


def has(obj: Obj, name: str) -> bool:
    """Return whether ``obj`` has a key Go would match to the field ``name``."""
    folded = name.casefold()
    return any(k == name or k.casefold() == folded for k, _ in obj)
