"""Static checks of the stack's "monitoring" profile: Prometheus scrape config, alert rules and Grafana dashboards."""

from __future__ import annotations

import json
import os
import re
import subprocess
from typing import Any

import yaml
from durable_sidecar.settings import Settings

from tests.compose_stack import (
    MONITORING,
    ROOT,
    SERVICES,
    dockerfile_env,
    environment,
    services,
    volume_mounts,
)

# --- dashboards and alerts (the "monitoring" profile) -------------------------------------------

PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
GRAFANA_DIR = ROOT / "deploy" / "grafana"
_METRIC_NAME = re.compile(r"\bdurable_[a-z_]+\b")


def _exported_metric_names() -> set[str]:
    """Every series name the sidecar exports (metrics.py's collectors, counters and histograms expanded)."""
    from durable_sidecar import metrics

    names: set[str] = set()
    for value in vars(metrics).values():
        describe = getattr(value, "describe", None)
        if describe is None or not callable(describe) or isinstance(value, type):
            continue
        for family in describe():
            names.add(family.name)
            names.update(family.name + suffix for suffix in ("_total", "_bucket", "_sum", "_count", "_created"))
    return names


def test_monitoring_services_are_opt_in_and_mount_the_deploy_files(compose: dict[str, Any]) -> None:
    for name in SERVICES:
        profiles = services(compose)[name].get("profiles")
        assert (profiles == ["monitoring"]) == (name in MONITORING), f"{name}: profiles {profiles}"
    binds = {name: {os.path.normpath(m["source"]): m["target"] for m in volume_mounts(services(compose)[name])
                    if m["type"] == "bind"} for name in MONITORING}
    assert binds["prometheus"] == {"deploy/prometheus/prometheus.yml": "/etc/prometheus/prometheus.yml",
                                   "deploy/prometheus/alerts.yml": "/etc/prometheus/alerts.yml"}
    assert binds["grafana"] == {"deploy/grafana/provisioning": "/etc/grafana/provisioning",
                                "deploy/grafana/dashboards": "/var/lib/grafana/dashboards"}
    assert "GF_SECURITY_ADMIN_PASSWORD" in environment(services(compose)["grafana"]), "no default admin/admin"


def test_prometheus_scrapes_the_sidecar_and_loads_the_alert_rules() -> None:
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    # Relative to the config file: the container mounts both files in /etc/prometheus.
    assert config["rule_files"] == ["alerts.yml"]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    targets = [t for group in jobs["durable-sidecar"]["static_configs"] for t in group["targets"]]
    assert targets == ["sidecar:9464"] and jobs["durable-sidecar"].get("metrics_path", "/metrics") == "/metrics"
    assert Settings().metrics_address.endswith(":9464") and "DURABLE_METRICS_ADDRESS" in dict(dockerfile_env())


def test_promtool_accepts_the_prometheus_config_and_its_alert_rules_as_shipped() -> None:
    """Prometheus's own checker on the files in the repository (make test unpacks promtool: make promtool-setup)."""
    promtool = os.environ.get("DURABLE_PROMTOOL", "")
    assert promtool and os.access(promtool, os.X_OK), \
        f"promtool not found at {promtool!r}: run `make promtool-setup` (make test does)"
    config = subprocess.run([promtool, "check", "config", str(PROMETHEUS_DIR / "prometheus.yml")],
                            capture_output=True, text=True, timeout=60)
    assert config.returncode == 0, config.stdout + config.stderr
    assert "SUCCESS: 1 rule files found" in config.stdout + config.stderr, config.stdout + config.stderr
    rules = subprocess.run([promtool, "check", "rules", str(PROMETHEUS_DIR / "alerts.yml")],
                           capture_output=True, text=True, timeout=60)
    assert rules.returncode == 0, rules.stdout + rules.stderr


def test_alert_rules_are_valid_and_use_exported_metrics() -> None:
    rules = yaml.safe_load((PROMETHEUS_DIR / "alerts.yml").read_text())
    exported = _exported_metric_names()
    alerts = {}
    for group in rules["groups"]:
        assert group["name"] and group["rules"]
        for rule in group["rules"]:
            assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}, rule.get("alert")
            assert rule["labels"]["severity"] in ("warning", "critical")
            assert rule["annotations"]["summary"] and rule["annotations"]["description"]
            assert re.fullmatch(r"\d+[smh]", rule["for"])
            for name in _METRIC_NAME.findall(rule["expr"]):
                assert name in exported, f"{rule['alert']}: {name} is not a metric the sidecar exports"
            alerts[rule["alert"]] = rule["expr"]
    assert {"DurableOldestStalledInstanceTooOld", "DurableManyStalledInstances", "DurableWakeUpsOverdue"} <= set(alerts)
    # Every sidecar reports the same database-wide gauges: aggregate with max, never sum.
    for name, expr in alerts.items():
        if "durable_instances" in expr or "durable_wake_ups_due" in expr or "oldest_stalled" in expr:
            assert "max by (namespace)" in expr and "sum" not in expr, name


def test_grafana_provisions_the_datasource_and_a_valid_dashboard() -> None:
    datasources = yaml.safe_load((GRAFANA_DIR / "provisioning" / "datasources" / "prometheus.yml").read_text())
    (source,) = datasources["datasources"]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    providers = yaml.safe_load((GRAFANA_DIR / "provisioning" / "dashboards" / "durable.yml").read_text())
    assert [p["options"]["path"] for p in providers["providers"]] == ["/var/lib/grafana/dashboards"]
    dashboards = sorted((GRAFANA_DIR / "dashboards").glob("*.json"))
    assert dashboards, "no dashboard JSON under deploy/grafana/dashboards"
    exported = _exported_metric_names()
    for path in dashboards:
        dashboard = json.loads(path.read_text())
        assert dashboard["uid"] and dashboard["title"] and dashboard["panels"]
        assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
        exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
        for panel in dashboard["panels"]:
            assert panel["datasource"]["uid"] == source["uid"], f"{path.name}: {panel['title']} names another datasource"
        used = {name for expr in exprs for name in _METRIC_NAME.findall(expr)}
        assert used <= exported, f"{path.name}: not exported by the sidecar: {sorted(used - exported)}"
        for gauge in ("durable_instances", "durable_wake_ups_due", "durable_oldest_stalled_instance_age_seconds"):
            assert gauge in used, f"{path.name} does not show {gauge}"
