"""Write deploy/kubernetes/prometheusrule.yaml from the rule files in deploy/prometheus/rules/.

    python tests/deploy/regen_prometheusrule.py
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("numa-exporter.rules.yml", "numa-exporter.recording.yml",
           "numa-exporter.kubernetes.yml")
RULES_DIR = REPO / "deploy" / "prometheus" / "rules"
OUT = REPO / "deploy" / "kubernetes" / "prometheusrule.yaml"
HEADER = (
    "# The alerting and recording rules of deploy/prometheus/rules/ for the Prometheus Operator.\n"
    "# Generated from deploy/prometheus/rules/*.yml;\n"
    "# tests/deploy/test_kubernetes.py fails when the copies differ. Regenerate with:\n"
    "#   python tests/deploy/regen_prometheusrule.py\n"
)


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, s: str) -> yaml.Node:
    style = "|" if "\n" in s else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", s, style=style)


_Dumper.add_representer(str, _str)


def document() -> dict[str, Any]:
    """Return the PrometheusRule object holding every group of the rule files."""
    groups: list[Any] = []
    for name in SOURCES:
        groups += yaml.safe_load((RULES_DIR / name).read_text())["groups"]
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "numa-exporter", "namespace": "numa-exporter",
                     "labels": {"app.kubernetes.io/name": "numa-exporter"}},
        "spec": {"groups": groups},
    }


def render() -> str:
    """Return the file's text."""
    body = yaml.dump(document(), Dumper=_Dumper, sort_keys=False, width=1000,
                     allow_unicode=True)
    return HEADER + body


if __name__ == "__main__":
    OUT.write_text(render())
    print(f"wrote {OUT}")
