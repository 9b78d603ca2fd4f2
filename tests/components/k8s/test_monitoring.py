"""The monitoring stack as the chart renders it: its values are the chart's own keys, Prometheus
selects every monitor and rule the stack creates, Grafana loads the dashboard, and every alert
and alarm reaches a person (Alertmanager's routes checked by amtool, the CloudWatch path by the
resources that carry it)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from chart_values import merged, unknown_keys
from stack_files import AWS_STACKS, STACKS, stack_values

from components.aws import observability
from components.config import load_config
from components.k8s import monitoring
from components.k8s.alerts import RULES_FILE
from components.k8s.dashboard import UID
from components.versions import KUBE_PROMETHEUS_STACK
from spotctl.preview.resources import PreviewResource
from spotctl.render.manifests import Rendered, render

CHART_DIR = f"kube-prometheus-stack-{KUBE_PROMETHEUS_STACK.version}"
# Subcharts: their values.yaml files are not among the schemas, so their keys go unchecked.
SUBCHARTS = ("grafana", "kube-state-metrics")
MONITOR_KINDS = {"ServiceMonitor": "serviceMonitor", "PodMonitor": "podMonitor"}


@pytest.fixture(scope="module")
def chart_defaults(shared_schemas: Path) -> dict:
    return yaml.safe_load((shared_schemas / CHART_DIR / "values.yaml").read_text())


@pytest.fixture(scope="module", params=STACKS)
def stack(request, stack_previews) -> tuple[str, list[PreviewResource], Rendered]:
    resources = stack_previews(request.param)
    return request.param, resources, render(resources)


@pytest.fixture(scope="module", params=AWS_STACKS)
def aws_stack(request, stack_previews) -> list[PreviewResource]:
    return stack_previews(request.param)


def release_values(rendered: Rendered) -> dict:
    (release,) = [r for r in rendered.releases if r["name"] == KUBE_PROMETHEUS_STACK.name]
    assert (release["chart"], release["version"]) == (
        KUBE_PROMETHEUS_STACK.chart,
        KUBE_PROMETHEUS_STACK.version,
    )
    assert release["namespace"] == monitoring.NAMESPACE
    return release["values"]


def effective_selector(spec: dict, kind: str) -> dict:
    """The chart's template: a set selector wins; else, with NilUsesHelmValues, the release
    label; else everything."""
    if spec.get(f"{kind}Selector"):
        return spec[f"{kind}Selector"]
    if spec.get(f"{kind}SelectorNilUsesHelmValues", True):
        return {"matchLabels": {"release": KUBE_PROMETHEUS_STACK.name}}
    return {}


def selects(selector: dict, labels: dict) -> bool:
    assert set(selector) <= {"matchLabels"}, selector
    return selector.get("matchLabels", {}).items() <= labels.items()


def test_values_are_the_charts_own_keys(stack, chart_defaults):
    values = release_values(stack[2])
    checked = {key: value for key, value in values.items() if key not in SUBCHARTS}
    assert list(unknown_keys(checked, chart_defaults)) == []
    # The subcharts take their keys under their own names, which the parent defines.
    assert set(SUBCHARTS) <= set(chart_defaults)


def test_prometheus_selects_every_monitor_and_rule(stack, chart_defaults):
    _, _, rendered = stack
    spec = merged(chart_defaults, release_values(rendered))["prometheus"]["prometheusSpec"]
    objects = [o for o in rendered.objects if o["kind"] in (*MONITOR_KINDS, "PrometheusRule")]
    assert {o["kind"] for o in objects} == {"PodMonitor", "PrometheusRule"}
    for obj in objects:
        kind = MONITOR_KINDS.get(obj["kind"], "rule")
        assert selects(effective_selector(spec, kind), obj["metadata"].get("labels", {}))
        assert spec[f"{kind}NamespaceSelector"] == {}  # every namespace
    # The charts' own ServiceMonitors (Kueue's, the termination handler's) carry labels we do
    # not set: only a selector of everything is sure to find them.
    assert effective_selector(spec, "serviceMonitor") == {}


def test_a_release_label_selector_would_miss_an_unlabelled_monitor():
    spec = {"serviceMonitorSelector": {}, "serviceMonitorSelectorNilUsesHelmValues": True}
    assert not selects(effective_selector(spec, "serviceMonitor"), {"app": "kueue"})


def test_grafana_loads_the_dashboard(stack, chart_defaults):
    _, _, rendered = stack
    sidecar = merged(chart_defaults, release_values(rendered))["grafana"]["sidecar"]["dashboards"]
    (configmap,) = [
        o
        for o in rendered.objects
        if o["kind"] == "ConfigMap" and f"{UID}.json" in o.get("data", {})
    ]
    assert sidecar["enabled"] is True
    labels = configmap["metadata"]["labels"]
    assert labels[sidecar["label"]] == sidecar["labelValue"]
    assert sidecar["searchNamespace"] in ("ALL", configmap["metadata"]["namespace"])


def test_controllers_run_on_the_stable_pool(stack):
    values = release_values(stack[2])
    for selector in (
        values["prometheus"]["prometheusSpec"]["nodeSelector"],
        values["alertmanager"]["alertmanagerSpec"]["nodeSelector"],
        values["prometheusOperator"]["nodeSelector"],
        values["grafana"]["nodeSelector"],
        values["kube-state-metrics"]["nodeSelector"],
    ):
        assert selector == {"node-pool": "stable"}


# --- every alert and alarm reaches someone


def amtool(*args: str) -> subprocess.CompletedProcess:
    assert shutil.which("amtool"), "amtool missing: apt-get install -y prometheus-alertmanager"
    return subprocess.run(["amtool", *args], capture_output=True, text=True, timeout=60)


def alertmanager_file(values: dict, defaults: dict, folder: Path) -> Path:
    """The configuration Alertmanager runs with: the chart's, with the release's merged over."""
    config = merged(defaults["alertmanager"]["config"], values["alertmanager"]["config"])
    path = folder / "alertmanager.yaml"
    path.write_text(yaml.safe_dump(config))
    assert amtool("check-config", str(path)).returncode == 0, amtool("check-config", str(path))
    return path


def receivers(config: Path, labels: dict[str, str]) -> list[str]:
    args = [f"{key}={value}" for key, value in labels.items()]
    result = amtool("config", "routes", "test", f"--config.file={config}", *args)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def our_alerts() -> list[dict]:
    groups = yaml.safe_load(RULES_FILE.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def test_every_prometheus_alert_is_routed_to_the_stacks_targets(
    stack, chart_defaults, tmp_path: Path
):
    name, resources, rendered = stack
    config_file = alertmanager_file(release_values(rendered), chart_defaults, tmp_path)
    config = yaml.safe_load(config_file.read_text())
    for rule in our_alerts():
        labels = {"alertname": rule["alert"], "namespace": "team-a", **rule["labels"]}
        assert receivers(config_file, labels) == [monitoring.ONCALL], rule["alert"]
    # The chart's own alerts too (a sample of its rules), all but the two that fire by design.
    for alertname, severity in (("KubePodCrashLooping", "warning"), ("TargetDown", "critical")):
        labels = {"alertname": alertname, "severity": severity}
        assert receivers(config_file, labels) == [monitoring.ONCALL]
    (oncall,) = [r for r in config["receivers"] if r["name"] == monitoring.ONCALL]
    settings = load_config(stack_values(name))
    if settings.cloud == "aws":
        topics = {
            r.name.rsplit("-", 1)[1]: r.outputs["arn"]
            for r in resources
            if r.type == "aws:sns/topic:Topic"
        }
        # The on-call receiver publishes to the stack's alert topic, signed for its region; the
        # heartbeat, every minute, to the topic whose silence trips the dead man's switch.
        assert oncall["sns_configs"] == [
            {
                "topic_arn": topics["alerts"],
                "sigv4": {"region": settings.region},
                "send_resolved": True,
            }
        ]
        assert receivers(config_file, {"alertname": "Watchdog"}) == [monitoring.HEARTBEAT]
        (heartbeat,) = [r for r in config["receivers"] if r["name"] == monitoring.HEARTBEAT]
        assert [c["topic_arn"] for c in heartbeat["sns_configs"]] == [topics["heartbeat"]]
        (route,) = [r for r in config["route"]["routes"] if r["receiver"] == monitoring.HEARTBEAT]
        assert route["repeat_interval"] == monitoring.HEARTBEAT_INTERVAL
        assert receivers(config_file, {"alertname": "InfoInhibitor"}) == [monitoring.SILENT]
    else:
        for alertname in monitoring.SILENT_ALERTS:
            assert receivers(config_file, {"alertname": alertname}) == [monitoring.SILENT]
        # GKE: mail to every alert address through the stack's relay, over TLS.
        relay = settings.gcp.alert_email
        assert [
            (c["to"], c["from"], c["smarthost"], c["require_tls"]) for c in oncall["email_configs"]
        ] == [(email, relay.sender, relay.smarthost, True) for email in settings.alerts.emails]


MATCHER = re.compile(r'^(\w+)\s*(=~|!~|!=|=)\s*"?([^"]*)"?$')


def matches(matchers: list[str], labels: dict[str, str]) -> bool:
    """Alertmanager's matchers (`name = "v"`, `=~`, `!=`, `!~`) against a label set."""
    for matcher in matchers:
        name, op, value = MATCHER.match(matcher.strip()).groups()
        actual = labels.get(name, "")
        hit = re.fullmatch(value, actual) if "~" in op else actual == value
        if bool(hit) == op.startswith("!"):
            return False
    return True


def test_no_alert_that_always_fires_inhibits_another(stack, chart_defaults, tmp_path: Path):
    """An inhibition sourced by the heartbeat or the InfoInhibitor would silence its targets for
    good (the chart's InfoInhibitor rule would mute every lone info alert, such as
    JobRunningOnFallbackTooLong)."""
    config_file = alertmanager_file(release_values(stack[2]), chart_defaults, tmp_path)
    rules = yaml.safe_load(config_file.read_text())["inhibit_rules"]
    assert rules
    for rule in rules:
        for alertname in monitoring.SILENT_ALERTS:
            labels = {"alertname": alertname, "severity": "none"}
            assert not matches(rule.get("source_matchers", []), labels), rule
    chart_rules = chart_defaults["alertmanager"]["config"]["inhibit_rules"]
    info_inhibitor = {"alertname": "InfoInhibitor", "severity": "none"}
    assert any(matches(r.get("source_matchers", []), info_inhibitor) for r in chart_rules)


def test_a_webhook_is_a_second_target(chart_defaults, tmp_path: Path):
    args = monitoring.MonitoringStackArgs(
        receiver={"sns_configs": [{"topic_arn": "arn:aws:sns:us-east-1:123456789012:t"}]},
        webhook_url="https://hooks.ml.test/alerts",
    )
    config_file = alertmanager_file(monitoring.stack_values(args), chart_defaults, tmp_path)
    (oncall,) = [
        r for r in yaml.safe_load(config_file.read_text())["receivers"] if r["name"] == "oncall"
    ]
    assert oncall["webhook_configs"] == [
        {"url": "https://hooks.ml.test/alerts", "send_resolved": True}
    ]
    with pytest.raises(ValueError, match="alerts would reach no one"):
        monitoring.MonitoringStackArgs(receiver={})


def test_every_alarm_and_alert_topic_message_reaches_a_person(aws_stack):
    """CloudWatch alarms and Alertmanager both publish to the topic; CloudWatch may use its key,
    Alertmanager's service account has a role that may publish, and people are subscribed (GKE's
    alert policies and their channels: tests/components/test_gcp_components.py)."""
    resources = aws_stack

    def of_type(token: str) -> list[PreviewResource]:
        return [r for r in resources if r.type == token]

    topics = {t.name.rsplit("-", 1)[1]: t for t in of_type("aws:sns/topic:Topic")}
    topic, heartbeat = topics["alerts"], topics["heartbeat"]
    arn = topic.outputs["arn"]
    alarms = of_type("aws:cloudwatch/metricAlarm:MetricAlarm")
    assert alarms and all(a.inputs["alarmActions"] == [arn] for a in alarms)
    subscriptions = of_type("aws:sns/topicSubscription:TopicSubscription")
    emails = [s for s in subscriptions if s.inputs["protocol"] == "email"]
    assert emails and all(s.inputs["topic"] == arn for s in emails)
    keys = of_type("aws:kms/key:Key")
    key = next(k for k in keys if k.outputs["arn"] == topic.inputs["kmsMasterKeyId"])
    principals = [s["Principal"] for s in json.loads(key.inputs["policy"])["Statement"]]
    assert {"Service": "cloudwatch.amazonaws.com"} in principals
    association = next(
        a
        for a in of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
        if a.inputs["serviceAccount"] == monitoring.ALERTMANAGER_SERVICE_ACCOUNT
    )
    assert association.inputs["namespace"] == monitoring.NAMESPACE
    role_policy = next(
        p
        for p in of_type("aws:iam/rolePolicy:RolePolicy")
        if p.name == association.name.removesuffix("-pod-identity") + "-policy"
    )
    statements = json.loads(role_policy.inputs["policy"])["Statement"]
    published = {arn for s in statements if s["Action"] == "sns:Publish" for arn in s["Resource"]}
    assert published == {arn, heartbeat.outputs["arn"]}


def test_the_dead_mans_switch_alarms_outside_the_cluster(aws_stack):
    """Alertmanager's heartbeat goes to a topic of its own; SNS publishes
    NumberOfMessagesPublished per topic only while messages arrive (AWS SNS monitoring docs), so
    the alarm treats a missing count as breaching and pages through the alert topic."""
    topics = {r.name.rsplit("-", 1)[1]: r for r in aws_stack if r.type == "aws:sns/topic:Topic"}
    (alarm,) = [
        r
        for r in aws_stack
        if r.type == "aws:cloudwatch/metricAlarm:MetricAlarm" and r.inputs["namespace"] == "AWS/SNS"
    ]
    assert alarm.inputs["metricName"] == "NumberOfMessagesPublished"
    assert alarm.inputs["dimensions"] == {"TopicName": topics["heartbeat"].outputs["name"]}
    assert alarm.inputs["treatMissingData"] == "breaching"
    assert (alarm.inputs["comparisonOperator"], alarm.inputs["threshold"]) == (
        "LessThanThreshold",
        1,
    )
    # Every period holds several heartbeats (one a minute): one missed send never pages.
    silence = alarm.inputs["period"] * alarm.inputs["evaluationPeriods"]
    assert silence == observability.HEARTBEAT_SILENCE_MINUTES * 60 >= 3 * alarm.inputs["period"]
    assert alarm.inputs["alarmActions"] == [topics["alerts"].outputs["arn"]]
    assert not any(
        s.inputs["topic"] == topics["heartbeat"].outputs["arn"]
        for s in aws_stack
        if s.type == "aws:sns/topicSubscription:TopicSubscription"
    )


# The chart's `up{job=...}` absence alerts and the values that gate them, from its
# templates/prometheus/rules-1.14/ (kube-prometheus-stack 88.5.3: each file is rendered only if
# `defaultRules.rules.<group>` and `<component>.enabled` are true):
# alert -> (job, component whose scrape job it is, defaultRules.rules group).
ABSENCE_ALERTS = {
    "KubeAPIDown": ("apiserver", "kubeApiServer", "kubernetesSystem"),
    "KubeletDown": ("kubelet", "kubelet", "kubernetesSystem"),
    "KubeControllerManagerDown": (
        "kube-controller-manager",
        "kubeControllerManager",
        "kubeControllerManager",
    ),
    "KubeSchedulerDown": ("kube-scheduler", "kubeScheduler", "kubeSchedulerAlerting"),
    "KubeProxyDown": ("kube-proxy", "kubeProxy", "kubeProxy"),
    "etcdMembersDown": ("etcd", "kubeEtcd", "etcd"),
}
# What a managed control plane (EKS, GKE) lets Prometheus scrape: not the controller manager,
# scheduler or etcd, and EKS's kube-proxy add-on binds its metrics to 127.0.0.1:10249.
SCRAPABLE_JOBS = {"apiserver", "kubelet"}


def absence_alerts(values: dict) -> dict[str, str]:
    """alert -> job, for the absence alerts the chart renders with these values."""
    rules = values["defaultRules"]
    return {
        alert: job
        for alert, (job, component, group) in ABSENCE_ALERTS.items()
        if rules["create"] and rules["rules"][group] and values[component]["enabled"]
    }


def test_no_alert_waits_on_a_scrape_target_the_cluster_hides(stack, chart_defaults):
    values = merged(chart_defaults, release_values(stack[2]))
    assert set(absence_alerts(values).values()) <= SCRAPABLE_JOBS
    assert set(absence_alerts(values)) == {"KubeAPIDown", "KubeletDown"}
    # The chart's defaults would page forever on a managed cluster.
    assert set(absence_alerts(chart_defaults).values()) - SCRAPABLE_JOBS == {
        "kube-controller-manager",
        "kube-scheduler",
        "kube-proxy",
        "etcd",
    }


def test_prometheus_keeps_its_history_on_a_volume(stack, chart_defaults):
    spec = merged(chart_defaults, release_values(stack[2]))["prometheus"]["prometheusSpec"]
    assert (spec["retention"], spec["retentionSize"]) == (
        monitoring.RETENTION,
        monitoring.RETENTION_SIZE,
    )
    claim = spec["storageSpec"]["volumeClaimTemplate"]["spec"]
    assert claim["resources"]["requests"]["storage"] == f"{monitoring.VOLUME_GIB}Gi"
    # retentionSize leaves room on the volume for the write-ahead log and compaction.
    assert int(monitoring.RETENTION_SIZE.removesuffix("GB")) < 0.95 * monitoring.VOLUME_GIB
    name, resources, rendered = stack
    classes = [o for o in rendered.all_objects() if o["kind"] == "StorageClass"]
    if load_config(stack_values(name)).cloud == "aws":
        # The EBS CSI driver's own parameters (aws-ebs-csi-driver docs/parameters.md).
        (storage_class,) = classes
        assert storage_class["provisioner"] == "ebs.csi.aws.com"
        assert storage_class["parameters"] == {"type": "gp3", "encrypted": "true"}
        assert claim["storageClassName"] == storage_class["metadata"]["name"]
        (addon,) = [
            r
            for r in resources
            if r.type == "aws:eks/addon:Addon" and r.inputs["addonName"] == "aws-ebs-csi-driver"
        ]
        (association,) = addon.inputs["podIdentityAssociations"]
        assert association["serviceAccount"] == "ebs-csi-controller-sa"
        role = next(r for r in resources if r.outputs.get("arn") == association["roleArn"])
        trust = json.loads(role.inputs["assumeRolePolicy"])["Statement"][0]
        assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"}
        assert (
            trust["Condition"]["StringEquals"]["aws:RequestTag/kubernetes-service-account"]
            == "ebs-csi-controller-sa"
        )
        assert any(
            r.type == "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
            and r.inputs["policyArn"].endswith("/AmazonEBSCSIDriverPolicy")
            and r.inputs["role"] == role.outputs["name"]
            for r in resources
        )
    else:
        # GKE: the cluster's default class (Persistent Disk CSI, encrypted at rest).
        assert classes == [] and "storageClassName" not in claim
