"""Parser for the names of the kubelet's pod log directories, ``/var/log/pods``.

The kubelet keeps each pod's container logs in ``<namespace>_<pod name>_<pod UID>/`` with
one sub-directory per container, ``<container name>/<restart count>.log``
(``pkg/kubelet/kuberuntime/helpers.go`` ``BuildPodLogsDirectory``,
``BuildContainerLogsDirectory``, since Kubernetes 1.14). A namespace is a DNS-1123 label and
a pod name a DNS-1123 subdomain: neither can contain ``_``, so the three parts split
unambiguously. These names are the only place on a node, besides the runtime's state,
where a pod UID meets its namespace and name.

Names are validated as the API server validates them (``k8s.io/apimachinery``
``IsDNS1123Label``, ``IsDNS1123Subdomain``); anything else is not a pod log directory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# IsDNS1123Label: at most 63, [a-z0-9]([-a-z0-9]*[a-z0-9])?
_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")
# IsDNS1123Subdomain: at most 253, labels joined by dots
_SUBDOMAIN_PART = _LABEL
MAX_SUBDOMAIN = 253
# pod UIDs: RFC 4122 text from the API server; static pods: 32 hex digits (a hash)
_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32}")


@dataclass(frozen=True, slots=True)
class PodLogDir:
    """Namespace, name and UID of a pod, from its log directory's name."""

    namespace: str
    pod: str
    uid: str


def is_dns1123_label(text: str) -> bool:
    """Return whether ``text`` is a DNS-1123 label (a namespace or container name)."""
    return len(text) <= 63 and _LABEL.fullmatch(text) is not None


def is_dns1123_subdomain(text: str) -> bool:
    """Return whether ``text`` is a DNS-1123 subdomain (a pod name)."""
    if not text or len(text) > MAX_SUBDOMAIN:
        return False
    return all(_SUBDOMAIN_PART.fullmatch(p) is not None for p in text.split("."))


def is_pod_uid(text: str) -> bool:
    """Return whether ``text`` looks like a pod UID (RFC 4122 text, or 32 hex digits)."""
    return _UID.fullmatch(text) is not None


def parse_pod_log_dir(name: str) -> PodLogDir | None:
    """Return the pod a ``/var/log/pods`` entry names, or None for any other name.

    Never raises.
    """
    if len(name) > 63 + 1 + MAX_SUBDOMAIN + 1 + 36:
        return None
    parts = name.split("_")
    if len(parts) != 3:
        return None
    namespace, pod, uid = parts
    if not (is_dns1123_label(namespace) and is_dns1123_subdomain(pod) and is_pod_uid(uid)):
        return None
    return PodLogDir(namespace, pod, uid)


def is_container_log_dir(name: str) -> bool:
    """Return whether ``name`` can be a container's log directory (a DNS-1123 label)."""
    return is_dns1123_label(name)
