"""Pure parsers: bytes of one kernel file in, frozen dataclasses out; no I/O, never raise."""
