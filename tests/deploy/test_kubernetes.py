"""Kubernetes manifests: schema validation without a cluster, and the settings that matter.

Kubernetes' own kinds (Namespace, ServiceAccount, DaemonSet, Service) are validated with
kubernetes-validate (bundled OpenAPI schemas, --strict: unknown fields fail) for the oldest
and newest Kubernetes versions tested. The Prometheus Operator's ServiceMonitor and
PrometheusRule are CRDs, validated against the minimal JSON Schemas in schemas/ (README there).
"""

from __future__ import annotations

import copy
import json
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from . import regen_prometheusrule
from .helpers import (
    DEPLOY,
    FIXTURE_ROOTS,
    exporter_available,
    exporter_command,
    free_port,
    missing,
    pending_flags_not_yet_known,
    running,
)

K8S = DEPLOY / "kubernetes"
SCHEMAS = Path(__file__).parent / "schemas"
VERSIONS = ("1.28.0", "1.37.0")
CRD_SCHEMAS = {"ServiceMonitor": "servicemonitor.v1.json",
               "PrometheusRule": "prometheusrule.v1.json"}


def manifests() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out[doc["kind"]] = doc
    return out


def kv() -> Any:
    try:
        import kubernetes_validate
    except ImportError:
        missing("kubernetes-validate (pip install kubernetes-validate==1.37.0)")
    return kubernetes_validate


def crd_validator(kind: str) -> Any:
    try:
        import jsonschema
    except ImportError:
        missing("jsonschema (installed with kubernetes-validate)")
    schema = json.loads((SCHEMAS / CRD_SCHEMAS[kind]).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_expected_objects() -> None:
    assert set(manifests()) == {"Namespace", "ServiceAccount", "DaemonSet", "Service",
                                "ServiceMonitor", "PrometheusRule"}
    for doc in manifests().values():
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "numa-exporter", doc["kind"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("kind", ["Namespace", "ServiceAccount", "DaemonSet", "Service"])
def test_builtin_kinds_validate_strictly(kind: str, version: str) -> None:
    kv().validate(manifests()[kind], version, strict=True)


def test_strict_validation_rejects_a_misspelt_field() -> None:
    mod = kv()
    ds = copy.deepcopy(manifests()["DaemonSet"])
    ds["spec"]["template"]["spec"]["hostPid"] = True
    with pytest.raises(mod.ValidationError):
        mod.validate(ds, VERSIONS[-1], strict=True)
    ds = copy.deepcopy(manifests()["DaemonSet"])
    ds["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] = [1]
    with pytest.raises(mod.ValidationError):
        mod.validate(ds, VERSIONS[-1], strict=True)


@pytest.mark.parametrize("kind", sorted(CRD_SCHEMAS))
def test_crds_validate_against_their_schema(kind: str) -> None:
    errors = [e.message for e in crd_validator(kind).iter_errors(manifests()[kind])]
    assert not errors, errors


def test_crd_schemas_reject_mistakes() -> None:
    sm = copy.deepcopy(manifests()["ServiceMonitor"])
    sm["spec"]["endpoints"][0]["intervall"] = "15s"
    assert list(crd_validator("ServiceMonitor").iter_errors(sm))
    sm = copy.deepcopy(manifests()["ServiceMonitor"])
    sm["spec"]["endpoints"][0]["interval"] = "15 seconds"
    assert list(crd_validator("ServiceMonitor").iter_errors(sm))
    pr = copy.deepcopy(manifests()["PrometheusRule"])
    del pr["spec"]["groups"][0]["rules"][0]["expr"]
    assert list(crd_validator("PrometheusRule").iter_errors(pr))


def test_daemonset_privileges_and_mounts() -> None:
    ds = manifests()["DaemonSet"]
    pod = ds["spec"]["template"]["spec"]
    assert pod["hostPID"] is True
    assert {"operator": "Exists"} in pod["tolerations"]
    assert pod["automountServiceAccountToken"] is False
    (c,) = pod["containers"]
    sc = c["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["SYS_PTRACE", "DAC_READ_SEARCH"]}
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert {"cpu", "memory"} <= set(c["resources"]["limits"])
    assert {"cpu", "memory"} <= set(c["resources"]["requests"])
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in pod["volumes"]}
    for name, host, inside in (("proc", "/proc", "/host/proc"), ("sys", "/sys", "/host/sys")):
        assert vols[name]["hostPath"]["path"] == host
        assert mounts[name]["mountPath"] == inside and mounts[name]["readOnly"] is True
    assert all(m.get("readOnly") for m in c["volumeMounts"] if "hostPath" in vols[m["name"]])
    assert "--path.procfs=/host/proc" in c["args"] and "--path.sysfs=/host/sys" in c["args"]
    assert c["ports"] == [{"name": "metrics", "containerPort": 10061, "protocol": "TCP"}]


def test_daemonset_mounts_the_kubernetes_files_read_only_under_the_rootfs() -> None:
    """Kubelet checkpoints (their directory: the kubelet renames new files over them),
    pod log directories, the runtimes' container specs and the CDI spec directories, below
    --path.rootfs=/host."""
    pod = manifests()["DaemonSet"]["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert "--path.rootfs=/host" in c["args"]
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in pod["volumes"]}
    for name, host, kind in (
            ("kubelet", "/var/lib/kubelet", "Directory"),
            ("pod-logs", "/var/log/pods", "Directory"),
            ("containerd-tasks", "/run/containerd/io.containerd.runtime.v2.task", ""),
            ("crio-containers", "/run/containers/storage/overlay-containers", ""),
            ("cdi-etc", "/etc/cdi", ""), ("cdi-run", "/var/run/cdi", "")):
        assert vols[name]["hostPath"] == {"path": host, "type": kind}, name
        assert mounts[name]["mountPath"] == "/host" + host, name
        assert mounts[name]["readOnly"] is True, name
        assert "mountPropagation" not in mounts[name], name
    # nothing but these is mounted under the rootfs: no "/" of the host
    under_root = sorted(m["mountPath"] for m in c["volumeMounts"]
                        if m["mountPath"].startswith("/host/")
                        and m["name"] not in ("proc", "sys"))
    assert under_root == sorted("/host" + vols[n]["hostPath"]["path"] for n in (
        "kubelet", "pod-logs", "containerd-tasks", "crio-containers", "cdi-etc", "cdi-run"))


def test_service_and_servicemonitor_agree() -> None:
    m = manifests()
    svc, sm, ds = m["Service"], m["ServiceMonitor"], m["DaemonSet"]
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["ports"] == [
        {"name": "metrics", "port": 10061, "targetPort": "metrics", "protocol": "TCP"}]
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert ds["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert [e["port"] for e in sm["spec"]["endpoints"]] == ["metrics"]
    # job="numa-exporter" (the Service's name) is what NumaExporterDown matches
    assert "jobLabel" not in sm["spec"] and svc["metadata"]["name"] == "numa-exporter"


def test_prometheusrule_matches_the_rule_files() -> None:
    text = (K8S / "prometheusrule.yaml").read_text()
    assert text == regen_prometheusrule.render(), (
        "deploy/kubernetes/prometheusrule.yaml is stale: "
        "run python tests/deploy/regen_prometheusrule.py")
    assert manifests()["PrometheusRule"] == regen_prometheusrule.document()


def test_daemonset_args_start_the_exporter(tmp_path: Path) -> None:
    """The container's args, with the host mounts mapped to a fixture root, are accepted and
    name the fixture node's pods."""
    if not exporter_available():
        missing("the numa-exporter command")
    root = FIXTURE_ROOTS / "kubernetes"
    if not root.is_dir():
        missing(f"fixture root {root}")
    (c,) = manifests()["DaemonSet"]["spec"]["template"]["spec"]["containers"]
    port = free_port()
    pending = pending_flags_not_yet_known()  # flags the CLI gets later: left out until then
    args = [a.replace("/host/proc", str(root / "proc")).replace("/host/sys", str(root / "sys"))
            .replace("--path.rootfs=/host", f"--path.rootfs={root / 'rootfs'}")
            .replace("--web.listen-address=:10061", f"--web.listen-address=127.0.0.1:{port}")
            for a in c["args"] if a.split("=", 1)[0] not in pending]
    assert f"--web.listen-address=127.0.0.1:{port}" in args, shlex.join(args)
    with running([*exporter_command(), *args], tmp_path / "exporter.log",
                 f"http://127.0.0.1:{port}/metrics", what="exporter with DaemonSet args",
                 ready_body=b'numa_process_kubernetes_info{container="app"'):
        pass
