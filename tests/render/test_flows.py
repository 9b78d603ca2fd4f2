"""Every flow the running platform needs is open on each of the repository's stacks, walked from
its source to its destination through every layer that can block it (tests/flows.py), and the
planted breaks of each layer are refused, naming the flow and the layer.

Upstream sources: the charts' values.yaml (kueue-chart-v0.19.2, kube-prometheus-stack-88.5.3 and
the others pinned in components/versions.py) and prometheus-engine v0.17.2's manifests/
operator.yaml (the collectors' namespace and pod labels), all in ../shared/schemas.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from pathlib import Path

import pytest
import yaml
from flows import Flow, Flows, Pods, table
from stack_files import REPO_ROOT

from components.generated_docs import GeneratedSection
from components.versions import CHARTS
from spotctl.preview.resources import PreviewResource
from spotctl.render.manifests import render

STACKS = ("dev", "prod", "gcp-dev", "gcp-prod")
FLOW_TABLE = GeneratedSection(
    REPO_ROOT / "docs" / "kubernetes.md",
    "flows",
    "SPOT_REGENERATE_DOCS=1 pytest tests/render/test_flows.py -k table",
)


def chart_defaults(schemas: Path):
    """A pinned chart's own values.yaml from ../shared/schemas."""
    versions = {chart.name: chart.version for chart in CHARTS}

    def defaults(chart: str) -> dict:
        folders = [
            f
            for f in schemas.iterdir()
            if f.name.startswith(f"{chart}-")
            and versions[chart] in f.name
            and (f / "values.yaml").is_file()
        ]
        assert len(folders) == 1, f"no values.yaml of {chart} {versions[chart]} in {schemas}"
        return yaml.safe_load((folders[0] / "values.yaml").read_text())

    return defaults


def gmp_collectors(schemas: Path) -> Pods:
    """Managed Prometheus's collectors as prometheus-engine's operator.yaml runs them."""
    documents = yaml.safe_load_all((schemas / "prometheus-engine-v0.17.2" / "operator.yaml").open())
    collector = next(
        d
        for d in documents
        if d and d["kind"] == "DaemonSet" and d["metadata"]["name"] == "collector"
    )
    pod = collector["spec"]["template"]
    assert not pod["spec"].get("hostNetwork"), "collectors on the host network: no pod policy"
    return Pods(
        "Managed Prometheus collectors",
        collector["metadata"]["namespace"],
        pod["metadata"]["labels"],
    )


@pytest.fixture(scope="module")
def stack_flows(stack_previews, shared_schemas):
    """Flows of a stack, from its preview (one per stack, shared with the other modules)."""

    def build(stack: str, resources: list[PreviewResource] | None = None, objects=None) -> Flows:
        resources = resources if resources is not None else stack_previews(stack)
        rendered = render(resources)
        if objects is not None:
            rendered.objects = objects(rendered.objects)
        return Flows(
            stack,
            resources,
            rendered,
            chart_defaults(shared_schemas),
            gmp_collectors(shared_schemas),
            REPO_ROOT,
        )

    return build


def blocked(flows: list[Flow]) -> list[str]:
    return [f"{flow}: {'; '.join(flow.blocked_by)}" for flow in flows if flow.blocked_by]


@pytest.mark.parametrize("stack", STACKS)
def test_every_flow_is_open(stack, stack_flows):
    flows = stack_flows(stack).all()
    kinds = {flow.kind for flow in flows}
    assert {
        "admission webhook",
        "scrape",
        "rank <-> rank",
        "rendezvous",
        "credentials",
        "checkpoints",
        "image pull",
        "command",
    } <= kinds
    assert blocked(flows) == []


@pytest.mark.parametrize("stack", STACKS)
def test_every_webhook_of_every_chart_is_a_flow(stack, stack_flows):
    webhooks = {flow.destination for flow in stack_flows(stack).webhooks()}
    assert webhooks == {"kueue webhooks (kueue-system)", "prometheus-operator webhook (monitoring)"}


@pytest.mark.parametrize("stack", ["gcp-prod", "gcp-dev"])
def test_managed_prometheus_scrapes_every_team(stack, stack_flows):
    flows = stack_flows(stack)
    scrapes = [f for f in flows.scrapes() if f.source.startswith("Managed Prometheus")]
    assert sorted(f.destination for f in scrapes) == sorted(p.name for p in flows.training_pods())
    assert all(f.opened_by and not f.blocked_by for f in scrapes)


def test_a_webhook_on_9443_with_no_rule_is_refused(stack_flows, stack_previews):
    """The chart's own port, which a private GKE control plane cannot reach; a firewall rule
    from the control-plane range opens it again."""

    def kueue_on_9443(resources: list[PreviewResource]) -> list[PreviewResource]:
        planted = []
        for r in resources:
            if r.type == "kubernetes:helm.sh/v3:Release" and r.inputs["chart"].endswith("kueue"):
                values = copy.deepcopy(r.inputs["values"])
                values.pop("webhookService")
                config = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
                config["webhook"]["port"] = 9443
                values["managerConfig"]["controllerManagerConfigYaml"] = yaml.safe_dump(config)
                r = dataclasses.replace(r, inputs={**r.inputs, "values": values})
            planted.append(r)
        return planted

    def kueue_webhook(stack: str, resources: list[PreviewResource]) -> Flow:
        (flow,) = [f for f in stack_flows(stack, resources).webhooks() if "kueue" in f.destination]
        return flow

    resources = kueue_on_9443(stack_previews("gcp-prod"))
    kueue = kueue_webhook("gcp-prod", resources)
    assert kueue.blocked_by == [
        "GKE firewall: the control plane reaches nodes on tcp 443 and 10250 only, and no rule "
        "from 172.16.0.0/28 opens tcp 9443"
    ]
    rule = PreviewResource(
        urn="urn:planted",
        type="gcp:compute/firewall:Firewall",
        name="kueue-webhooks",
        parent=None,
        custom=True,
        inputs={
            "direction": "INGRESS",
            "sourceRanges": ["172.16.0.0/28"],
            "allows": [{"protocol": "tcp", "ports": ["9443"]}],
        },
    )
    kueue = kueue_webhook("gcp-prod", [*resources, rule])
    assert kueue.blocked_by == [] and "firewall kueue-webhooks" in kueue.opened_by
    # EKS's cluster security group admits the control plane on any port.
    assert kueue_webhook("prod", kueue_on_9443(stack_previews("prod"))).blocked_by == []


def test_a_network_policy_without_gmp_system_is_refused(stack_flows):
    def without_gmp(objects: list[dict]) -> list[dict]:
        planted = copy.deepcopy(objects)
        for policy in (o for o in planted if o["kind"] == "NetworkPolicy"):
            for rule in policy["spec"]["ingress"]:
                rule["from"] = [p for p in rule["from"] if "gmp-system" not in str(p)]
        return planted

    flows = stack_flows("gcp-prod", objects=without_gmp)
    for scrape in flows.scrapes():
        namespace = scrape.destination.removeprefix("training pods (").removesuffix(")")
        if scrape.source.startswith("Prometheus"):
            assert scrape.blocked_by == [], scrape
            continue
        assert scrape.blocked_by, scrape
        for reason in scrape.blocked_by:
            assert reason.startswith(
                f"NetworkPolicy {namespace}/team-pods: no ingress rule admits Managed Prometheus "
                "collectors (gmp-system) on tcp "
            ), reason


@pytest.mark.parametrize(
    ("stack", "role_type", "permission", "command"),
    [
        (
            "gcp-prod",
            "gcp:projects/iAMCustomRole:IAMCustomRole",
            "compute.instances.simulateMaintenanceEvent",
            "spotctl drill --cloud-run",
        ),
        (
            "gcp-prod",
            "gcp:projects/iAMCustomRole:IAMCustomRole",
            "cloudscheduler.jobs.pause",
            "gcloud scheduler jobs pause",
        ),
        (
            "prod",
            "aws:iam/rolePolicy:RolePolicy",
            "fis:StartExperiment",
            "spotctl drill --cloud-run",
        ),
    ],
)
def test_a_documented_command_no_role_may_run_is_refused(
    stack, role_type, permission, command, stack_flows, stack_previews
):
    def without(resource: PreviewResource) -> PreviewResource:
        if resource.type != role_type:
            return resource
        if role_type.startswith("gcp"):
            kept = [p for p in resource.inputs["permissions"] if p != permission]
            return dataclasses.replace(resource, inputs={**resource.inputs, "permissions": kept})
        policy = resource.inputs["policy"]
        policy = policy.replace(f'"{permission}", ', "").replace(f', "{permission}"', "")
        return dataclasses.replace(resource, inputs={**resource.inputs, "policy": policy})

    flows = stack_flows(stack, [without(r) for r in stack_previews(stack)]).commands()
    refused = [f for f in flows if f.destination == command]
    assert refused
    for flow in refused:
        assert len(flow.blocked_by) == 1, flow
        assert flow.blocked_by[0].startswith("IAM: ") and permission in flow.blocked_by[0], flow


def test_an_egress_policy_that_cuts_the_object_store_is_refused(stack_flows):
    def egress_in_namespace(objects: list[dict]) -> list[dict]:
        fence = {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "stay-inside", "namespace": "team-vision"},
            "spec": {
                "podSelector": {},
                "policyTypes": ["Egress"],
                "egress": [{"to": [{"podSelector": {}}]}],
            },
        }
        return [*objects, fence]

    for stack in ("prod", "gcp-prod"):
        flows = stack_flows(stack, objects=egress_in_namespace).training()
        cut = {(f.kind, f.blocked_by[0]) for f in flows if f.blocked_by}
        store = "Amazon S3" if stack == "prod" else "Cloud Storage"
        assert (
            "checkpoints",
            f"NetworkPolicy team-vision/stay-inside: no egress rule admits {store} on tcp 443",
        ) in cut
        assert {kind for kind, _ in cut} == {"checkpoints", "credentials"}, cut


def test_the_flow_table_in_the_docs_is_current(stack_flows):
    body = table(stack_flows(stack) for stack in STACKS)
    if os.environ.get("SPOT_REGENERATE_DOCS"):
        FLOW_TABLE.regenerate(body, [])
    current = FLOW_TABLE.doc.read_text()
    assert current == FLOW_TABLE.filled(current, body), (
        f"docs/kubernetes.md's flow table is stale: run {FLOW_TABLE.command}"
    )
