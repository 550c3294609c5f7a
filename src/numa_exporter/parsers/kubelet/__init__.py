"""Parsers of the kubelet's checkpoint files (``cpu_manager_state``, ``memory_manager_state``,
``device-plugins/kubelet_internal_checkpoint``): the checkpoint envelope they share
(``envelope``), and ``go_json``, which decodes JSON as Go's ``encoding/json`` does and prints
the value as go-spew does, so that the kubelet's checksum can be recomputed. Pure, like every
parser: bytes in, frozen dataclasses out, never raise."""
