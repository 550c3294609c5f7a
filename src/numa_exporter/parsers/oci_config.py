"""Parser for a container's OCI runtime ``config.json``: the pod and container it runs.

Both CRI runtimes write the OCI runtime spec of every container (and of each pod's pause
"sandbox" container) with the pod's identity in ``annotations``:

* containerd, ``/run/containerd/io.containerd.runtime.v2.task/k8s.io/<id>/config.json``
  (``pkg/cri/annotations/annotations.go``): ``io.kubernetes.cri.container-type``
  (``sandbox`` or ``container``), ``io.kubernetes.cri.sandbox-namespace``,
  ``...sandbox-name``, ``...sandbox-uid`` (containerd 1.6+), ``...container-name``,
  ``...sandbox-id``;
* CRI-O, ``/run/containers/storage/overlay-containers/<id>/userdata/config.json``
  (``pkg/annotations``, ``internal/annotations``): ``io.kubernetes.cri-o.ContainerType``,
  ``io.kubernetes.pod.namespace``, ``io.kubernetes.pod.name``, ``io.kubernetes.pod.uid``,
  ``io.kubernetes.container.name``, ``io.kubernetes.cri-o.SandboxID``.

``linux.cgroupsPath`` is the cgroup the runtime asked runc for (``<slice>:<prefix>:<id>``
with the systemd driver, a path with cgroupfs). Values are validated as the API validates
names; one that is not is dropped and counted. The file also holds the container's
environment and mounts, so its size is bounded (``MAX_BYTES``) and nothing else is kept.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from numa_exporter.parsers.pod_log_dir import (
    is_dns1123_label,
    is_dns1123_subdomain,
    is_pod_uid,
)

MAX_BYTES = 1 << 20  # a spec with a large environment is tens of KiB
MAX_CGROUPS_PATH = 4096

ContainerType = Literal["sandbox", "container", ""]

CONTAINERD = {
    "type": "io.kubernetes.cri.container-type",
    "namespace": "io.kubernetes.cri.sandbox-namespace",
    "pod": "io.kubernetes.cri.sandbox-name",
    "uid": "io.kubernetes.cri.sandbox-uid",
    "container": "io.kubernetes.cri.container-name",
    "sandbox_id": "io.kubernetes.cri.sandbox-id",
}
CRIO = {
    "type": "io.kubernetes.cri-o.ContainerType",
    "namespace": "io.kubernetes.pod.namespace",
    "pod": "io.kubernetes.pod.name",
    "uid": "io.kubernetes.pod.uid",
    "container": "io.kubernetes.container.name",
    "sandbox_id": "io.kubernetes.cri-o.SandboxID",
}


def _is_id(text: str) -> bool:
    """Return whether ``text`` is a runtime's container ID (64 lowercase hex digits)."""
    return len(text) == 64 and all(c in "0123456789abcdef" for c in text)


_VALID: dict[str, Callable[[str], bool]] = {
    "namespace": is_dns1123_label,
    "pod": is_dns1123_subdomain,
    "uid": is_pod_uid,
    "container": is_dns1123_label,
    "sandbox_id": _is_id,
}


@dataclass(frozen=True, slots=True)
class OciConfig:
    """The pod identity a runtime wrote into a container's spec.

    ``runtime`` is ``containerd`` or ``cri-o`` by the annotation keys found (empty when
    neither set is there); ``type`` ``sandbox`` (the pause container) or ``container``.
    Missing or invalid values are empty strings; ``error_count`` counts invalid ones, plus
    one when the file is not a JSON object (``error`` then says why).
    """

    runtime: str = ""
    type: ContainerType = ""
    namespace: str = ""
    pod: str = ""
    uid: str = ""
    container: str = ""
    sandbox_id: str = ""
    cgroups_path: str = ""
    error: str = ""
    error_count: int = 0


def _annotations(doc: dict[str, Any]) -> dict[str, str]:
    raw = doc.get("annotations")
    if not isinstance(raw, dict):
        return {}
    return {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, str)}


def parse_oci_config(data: bytes) -> OciConfig:
    """Return the pod, container and type a runtime's ``config.json`` names. Never raises."""
    if len(data) > MAX_BYTES:
        return OciConfig(error=f"larger than {MAX_BYTES} bytes", error_count=1)
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as err:
        return OciConfig(error=f"not JSON: {str(err)[:120]}", error_count=1)
    if not isinstance(doc, dict):
        return OciConfig(error="not a JSON object", error_count=1)
    ann = _annotations(doc)
    if CONTAINERD["type"] in ann or CONTAINERD["pod"] in ann:
        runtime, keys = "containerd", CONTAINERD
    elif CRIO["type"] in ann or CRIO["pod"] in ann:
        runtime, keys = "cri-o", CRIO
    else:
        runtime, keys = "", CONTAINERD
    values: dict[str, str] = {}
    errors = 0
    for name, check in _VALID.items():
        v = ann.get(keys[name], "")
        if v and not check(v):
            errors += 1
            v = ""
        values[name] = v
    kind = ann.get(keys["type"], "")
    ctype: ContainerType = kind if kind in ("sandbox", "container") else ""  # type: ignore[assignment]
    if kind and not ctype:
        errors += 1
    linux = doc.get("linux")
    cgroups_path = linux.get("cgroupsPath", "") if isinstance(linux, dict) else ""
    if not isinstance(cgroups_path, str) or len(cgroups_path) > MAX_CGROUPS_PATH:
        cgroups_path, errors = "", errors + 1
    return OciConfig(runtime, ctype, values["namespace"], values["pod"], values["uid"],
                     values["container"], values["sandbox_id"], cgroups_path,
                     f"{errors} annotation values invalid" if errors else "", errors)
