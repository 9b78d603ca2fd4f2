"""The flows a stack's running platform needs, each walked through every layer that can block it.

From a stack's preview (the cloud's resources) and render (the Kubernetes objects and Helm
releases), `Flows` lists each flow with its source, destination, port and identity, and for each
layer on its way either the rule that opens it or why the layer blocks it:

- network: GKE's firewall (the control plane reaches the nodes on tcp 443 and 10250 only, GKE's
  own rule, unless a firewall rule from the control-plane range opens more; the cluster's nodes
  and pods reach each other through GKE's intra-cluster rules), EKS's cluster security group
  (the control plane and every node share it, and it admits all traffic among its members), and
  NetworkPolicies, ingress at the destination's namespace and egress at the source's, by
  namespace and pod labels;
- identity: IAM (AWS role policies, Pod Identity associations, access entries; GCP roles,
  Workload Identity bindings) and RBAC (EKS access policies, GKE IAM and RoleBindings).

IAM is read by action: a role holds an action when an Allow statement of its policies names it
and no Deny does; resources and conditions are other tests' concern (tests/s3_iam.py,
tests/gcs_iam.py run the runtime under them).

Admission webhooks come from the pinned charts' values (../shared/schemas) merged with the
release's, as Helm merges them; the people's commands from the docs and runbooks that give them
to a role (`COMMAND_SCOPES`), each mapped to the permission its API documents (`AWS_ACTIONS`,
`GCLOUD_PERMISSIONS`, `KUBECTL_RBAC`, each naming its source).
"""

from __future__ import annotations

import fnmatch
import ipaddress
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from chart_values import merged
from runbook_checker import Command, commands_in, subcommand_of

from spotctl.preview.resources import PreviewResource
from spotctl.render.manifests import Rendered

# GKE's own firewall rule from the control plane to the nodes of a private cluster: tcp 443 and
# 10250 (GKE docs, "Add firewall rules for specific use cases": admission webhooks).
GKE_CONTROL_PLANE_PORTS = (443, 10250)
# Where pods get their credentials: the EKS Pod Identity agent (EKS user guide, "EKS Pod Identity
# agent": 169.254.170.23, port 80) and the GKE metadata server (GKE docs, "About the GKE
# metadata server": 169.254.169.254, port 80).
CREDENTIALS = {
    "aws": ("EKS Pod Identity agent", "169.254.170.23", 80),
    "gcp": ("GKE metadata server", "169.254.169.254", 80),
}
OBJECT_STORE = {"aws": "Amazon S3", "gcp": "Cloud Storage"}
HTTPS = 443
# What the runtime does to its checkpoints (training-image/spotsafe/storage/): the calls'
# IAM actions (Service Authorization Reference) and permissions (Cloud Storage JSON API).
CHECKPOINT_ACTIONS = {
    "aws": ("s3:GetObject", "s3:PutObject", "s3:ListBucket", "s3:DeleteObject"),
    "gcp": (
        "storage.objects.create",
        "storage.objects.get",
        "storage.objects.list",
        "storage.objects.delete",
    ),
}
# What the controllers call in their cloud, by (namespace, service account): Karpenter launches
# and ends instances and reads its interruption queue (Karpenter's reference CloudFormation
# template); Alertmanager publishes to the alert topics (SNS API reference).
CONTROLLER_ACTIONS = {
    ("kube-system", "karpenter"): (
        "EC2 and SQS",
        ("ec2:CreateFleet", "ec2:TerminateInstances", "sqs:ReceiveMessage", "sqs:DeleteMessage"),
    ),
    ("monitoring", "alertmanager"): ("SNS", ("sns:Publish",)),
}
# AWS managed policies the stack attaches, by name: the actions of them the flows need (each
# policy's JSON in the AWS Managed Policy Reference).
AWS_MANAGED_ACTIONS = {
    "AmazonEC2ContainerRegistryPullOnly": (
        "ecr:GetAuthorizationToken",
        "ecr:BatchGetImage",
        "ecr:GetDownloadUrlForLayer",
    ),
}
# GCP predefined roles the stack grants: the permissions of each that the flows ask about (the
# IAM roles and permissions reference, each role's page); a pattern stands for a whole service.
PREDEFINED_PERMISSIONS = {
    "roles/container.admin": ("container.*",),
    "roles/container.clusterViewer": (
        "container.clusters.get",
        "container.clusters.list",
        "container.clusters.getCredentials",
    ),
    "roles/logging.viewer": ("logging.logEntries.list", "logging.logs.list"),
    "roles/monitoring.editor": ("monitoring.*",),
    "roles/monitoring.viewer": ("monitoring.timeSeries.list", "monitoring.dashboards.get"),
    "roles/cloudquotas.admin": ("cloudquotas.*",),
    "roles/cloudkms.viewer": ("cloudkms.keyRings.get", "cloudkms.cryptoKeys.get"),
    "roles/storage.admin": ("storage.*",),
    "roles/artifactregistry.reader": ("artifactregistry.repositories.downloadArtifacts",),
}
# The node's image pull: what it needs of the registry.
REGISTRY_PULL = {
    "aws": ("ecr:GetAuthorizationToken", "ecr:BatchGetImage"),
    "gcp": ("artifactregistry.repositories.downloadArtifacts",),
}
# EKS access policies (EKS user guide, "Review access policy permissions"): the Kubernetes
# ClusterRole each one equals.
EKS_ACCESS_POLICIES = {
    "AmazonEKSClusterAdminPolicy": "cluster-admin",
    "AmazonEKSEditPolicy": "edit",
    "AmazonEKSViewPolicy": "view",
}
# The verbs of Kubernetes's user-facing ClusterRoles (Kubernetes docs, "Using RBAC
# Authorization": user-facing roles); cluster-admin has every verb.
CLUSTER_ROLE_VERBS = {
    "view": {"get", "list", "watch"},
    "edit": {"get", "list", "watch", "create", "update", "patch", "delete"},
}

# AWS CLI operation -> IAM action (Service Authorization Reference, each service's actions
# table); "trust": the role assumed must trust the caller (sts AssumeRole).
AWS_ACTIONS = {
    "eks describe-nodegroup": ("eks:DescribeNodegroup",),
    "eks list-pod-identity-associations": ("eks:ListPodIdentityAssociations",),
    "eks update-nodegroup-config": ("eks:UpdateNodegroupConfig",),
    "sqs get-queue-attributes": ("sqs:GetQueueAttributes",),
    "events list-rules": ("events:ListRules",),
    "cloudwatch get-metric-statistics": ("cloudwatch:GetMetricStatistics",),
    "s3api list-object-versions": ("s3:ListBucketVersions",),
    # The runbook copies an older version: the source is read by version.
    "s3api copy-object": ("s3:GetObjectVersion", "s3:PutObject"),
    "fis start-experiment": ("fis:StartExperiment",),
    "fis get-experiment": ("fis:GetExperiment",),
    "service-quotas list-requested-service-quota-change-history": (
        "servicequotas:ListRequestedServiceQuotaChangeHistory",
    ),
    "sts assume-role": ("trust",),
}
# gcloud command -> the permission of the API method it calls (each method's "IAM Permissions"
# in the Compute Engine, GKE, Cloud Logging, Cloud Quotas and Cloud Scheduler API references).
GCLOUD_PERMISSIONS = {
    "container node-pools list": ("container.nodePools.list",),
    "container clusters update": ("container.clusters.update",),
    "logging read": ("logging.logEntries.list",),
    # gcloud waits for the zone operation the call starts.
    "compute instances simulate-maintenance-event": (
        "compute.instances.simulateMaintenanceEvent",
        "compute.zoneOperations.get",
    ),
    "compute project-info describe": ("compute.projects.get",),
    "compute regions describe": ("compute.regions.get",),
    "beta quotas preferences list": ("cloudquotas.quotas.get",),
    "scheduler jobs list": ("cloudscheduler.jobs.list",),
    "scheduler jobs describe": ("cloudscheduler.jobs.get",),
    "scheduler jobs run": ("cloudscheduler.jobs.run",),
    "scheduler jobs pause": ("cloudscheduler.jobs.pause",),
}
# `spotctl drill --cloud-run`: the calls of spotctl/drill/cloud.py (FIS ListExperimentTemplates,
# StartExperiment, GetExperiment; Compute aggregated instances list, simulateMaintenanceEvent,
# zone operations wait).
CLOUD_DRILL = {
    "aws": ("fis:ListExperimentTemplates", "fis:StartExperiment", "fis:GetExperiment"),
    "gcp": (
        "compute.instances.list",
        "compute.instances.simulateMaintenanceEvent",
        "compute.zoneOperations.get",
    ),
}
# kubectl subcommand -> the RBAC verb it needs on its object (kubectl reference; logs, exec and
# port-forward act on the pods' subresources).
KUBECTL_RBAC = {
    "get": "list",
    "describe": "get",
    "logs": "get",
    "exec": "create",
    "port-forward": "create",
    "delete": "delete",
    "patch": "patch",
    "create": "create",
    "apply": "patch",
    "replace": "update",
    "rollout restart": "patch",
}
CLOUD_CLIS = {"aws": "aws", "gcp": "gcloud"}
# Programs whose commands need no permission of a stack role: local tools, spotctl's offline
# commands, and Pulumi (the state backend's access, docs/deploy.md section 3).
LOCAL_PROGRAMS = {
    "spotctl",
    "curl",
    "grep",
    "tail",
    "head",
    "date",
    "python3",
    "printenv",
    "pulumi",
}


@dataclass(frozen=True)
class CommandScope:
    """Commands of a doc (a section of it, or a runbook folder) that the docs give a role."""

    path: str  # a doc, or a runbook folder ending in "/"
    role: str
    clouds: tuple[str, ...]
    section: str | None = None  # a "## " heading the commands lie under
    # Commands the doc gives someone outside the stack's roles, and who.
    elsewhere: Mapping[str, str] = field(default_factory=dict)
    # A resource type the stack must have for the commands to apply (the buffer's schedule).
    needs: str | None = None


# The on-call engineer (platform-admin, docs/operations.md "On-call") runs the runbooks and the
# operations; a team's engineers submit its runs (docs/kubernetes.md, docs/first-job.md;
# docs/deploy.md and docs/deploy-gcp.md, "Who may do what": AWS's ml-engineer role of the team,
# GCP's gcp.groups.team_engineers, bound to `edit` in the team's namespace).
COMMAND_SCOPES = (
    CommandScope("runbooks/aws/", "platform-admin", ("aws",)),
    CommandScope("runbooks/gcp/", "platform-admin", ("gcp",)),
    CommandScope("runbooks/training/", "platform-admin", ("aws", "gcp")),
    CommandScope(
        "docs/operations.md",
        "platform-admin",
        ("aws", "gcp"),
        # "Activate the cost allocation tags once per payer account"; Cost Explorer likewise.
        elsewhere={"aws ce": "the payer account's billing administrator"},
    ),
    CommandScope("docs/deploy.md", "platform-admin", ("aws",), "6. Quotas, before you need them"),
    CommandScope(
        "docs/deploy-gcp.md", "platform-admin", ("gcp",), "6. Quotas, before you need them"
    ),
    CommandScope(
        "docs/deploy-gcp.md",
        "platform-admin",
        ("gcp",),
        "9. The buffer: services by day, training by night",
        needs="gcp:cloudscheduler/job:Job",
    ),
    CommandScope("docs/kubernetes.md", "team-engineer", ("aws", "gcp"), "Submitting a run"),
    CommandScope("docs/first-job.md", "team-engineer", ("aws",), "Submit it and follow it"),
)


@dataclass(frozen=True)
class Pods:
    """Pods as a NetworkPolicy sees them: their namespace, labels and named ports."""

    name: str
    namespace: str
    labels: Mapping[str, str]
    ports: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Address:
    """Something that is not a pod: the control plane, a cloud API, a link-local agent."""

    name: str
    ip: str | None = None  # None: a public service address


@dataclass
class Flow:
    kind: str
    source: str
    destination: str
    port: str
    identity: str
    opened_by: list[str] = field(default_factory=list)
    blocked_by: list[str] = field(default_factory=list)
    where: str = ""  # a command's doc and line

    def layer(self, opened: str | None, blocked: str | None) -> None:
        if blocked:
            self.blocked_by.append(blocked)
        elif opened:
            self.opened_by.append(opened)

    def __str__(self) -> str:
        where = f" [{self.where}]" if self.where else ""
        return (
            f"{self.kind}: {self.source} -> {self.destination} ({self.port}, as "
            f"{self.identity}){where}"
        )


def chart_name(release: dict) -> str:
    return release["chart"].rstrip("/").rsplit("/", 1)[-1]


class Flows:
    """The flows of one stack. `chart_defaults(chart)` gives a chart's own values.yaml;
    `collectors` the cloud's managed metrics collectors (GKE: from prometheus-engine)."""

    def __init__(
        self,
        stack: str,
        resources: list[PreviewResource],
        rendered: Rendered,
        chart_defaults: Callable[[str], dict],
        collectors: Pods | None,
        repo: Path,
    ) -> None:
        self.stack, self.resources, self.rendered, self.repo = stack, resources, rendered, repo
        self.cloud = "aws" if self._of("aws:eks/cluster:Cluster") else "gcp"
        self.chart_defaults, self.collectors = chart_defaults, collectors
        objects = rendered.all_objects()
        self.namespaces = {
            o["metadata"]["name"]: o["metadata"].get("labels", {})
            for o in objects
            if o["kind"] == "Namespace"
        }
        self.policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
        self.teams = {
            o["metadata"]["namespace"]: o
            for o in objects
            if o["kind"] == "ServiceAccount" and o["metadata"]["name"] == "training"
        }

    def generic(self, text: str) -> str:
        """The stack's own names as placeholders, so that one row reads for every stack and
        team."""
        for namespace, account in self.teams.items():
            team = account["metadata"]["labels"]["spot-training/team"]
            for name in (namespace, team):
                text = re.sub(rf"\b{re.escape(name)}\b", "<team>", text)
        text = re.sub(
            r"projects/[\w-]+/roles/(\w+?)_\w+", r"projects/<project>/roles/\1_<env>", text
        )
        text = re.sub(r"\b(?:prod|dev)-", "<env>-", text)
        return re.sub(r"\bsg-[0-9a-f]+", "<cluster security group>", text)

    # -- the flows -----------------------------------------------------------------------

    def all(self) -> list[Flow]:
        return [
            *self.webhooks(),
            *self.scrapes(),
            *self.training(),
            *self.controllers(),
            *self.registry(),
            *self.commands(),
        ]

    def webhooks(self) -> list[Flow]:
        """The API server -> every admission webhook of every chart the stack installs."""
        flows = []
        for release in self.rendered.releases:
            for name, pods, service_port, target, serving in self._webhooks_of(release):
                flow = Flow(
                    "admission webhook",
                    "API server",
                    f"{name} ({pods.namespace})",
                    f"tcp {target} (Service {service_port})",
                    "the API server",
                )
                self._from_control_plane(flow, pods, target)
                flow.layer(
                    "the Service's target port is the one served",
                    None
                    if target == serving
                    else f"Service: {name}'s Service targets tcp {target}, the server listens on "
                    f"{serving}",
                )
                flows.append(flow)
        return flows

    def _webhooks_of(self, release: dict) -> list[tuple[str, Pods, int, int, int]]:
        """(name, pods, Service port, Service target port, port served) per webhook server."""
        chart = chart_name(release)
        if chart in CHARTS_WITHOUT_WEBHOOKS:
            return []
        values = merged(self.chart_defaults(chart), release["values"])
        namespace = release["namespace"]
        if chart == "kueue":
            # templates/webhook/service.yaml: ports from webhookService.ports; the manager
            # serves on its Configuration's webhook.port.
            config = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
            pods = Pods(
                "kueue webhooks",
                namespace,
                {"app.kubernetes.io/name": "kueue", "control-plane": "controller-manager"},
            )
            return [
                (pods.name, pods, p["port"], p["targetPort"], config["webhook"]["port"])
                for p in values["webhookService"]["ports"]
            ]
        if chart == "kube-prometheus-stack":
            operator = values["prometheusOperator"]
            if not (operator["enabled"] and operator["admissionWebhooks"]["enabled"]):
                return []
            # The operator serves its webhook on tls.internalPort behind its Service's 443.
            port = operator["tls"]["internalPort"]
            pods = Pods(
                "prometheus-operator webhook", namespace, {"app": "kube-prometheus-stack-operator"}
            )
            return [(pods.name, pods, HTTPS, port, port)]
        raise AssertionError(f"chart {chart}: say whether it installs admission webhooks")

    def scrapes(self) -> list[Flow]:
        """Each scraper -> the training pods' metrics ports: the cluster's Prometheus, and the
        cloud's managed collectors where a ClusterPodMonitoring asks them to."""
        scrapers = [Pods("Prometheus", "monitoring", {"app.kubernetes.io/name": "prometheus"})]
        if self._of("kubernetes:monitoring.googleapis.com/v1:ClusterPodMonitoring"):
            assert self.collectors is not None, "a ClusterPodMonitoring needs its collectors"
            scrapers.append(self.collectors)
        flows = []
        for scraper in scrapers:
            for pods in self.training_pods():
                ports = sorted(p for n, p in pods.ports.items() if n.startswith("metrics"))
                span = f"{ports[0]}-{ports[-1]}" if len(ports) > 1 else f"{ports[0]}"
                flow = Flow(
                    "scrape",
                    f"{scraper.name} ({scraper.namespace})",
                    pods.name,
                    f"tcp {span}",
                    "none (plain HTTP)",
                )
                self._in_cluster(flow)
                for port in ports:
                    self._policies(flow, scraper, pods, port)
                flows.append(_once(flow))
        return flows

    def training(self) -> list[Flow]:
        """Rank <-> rank, rank -> rendezvous store, and each rank -> its credentials and the
        object store."""
        flows = []
        for pods in self.training_pods():
            team = pods.namespace
            ranks = Flow(
                "rank <-> rank",
                pods.name,
                pods.name,
                "any tcp (collectives, memory-tier copies)",
                "none",
            )
            self._in_cluster(ranks)
            self._policies(ranks, pods, pods, None)
            flows.append(ranks)
            store = self._rendezvous(team)
            rdzv = Flow(
                "rendezvous", pods.name, store.name, f"tcp {store.ports['rendezvous']}", "none"
            )
            self._in_cluster(rdzv)
            self._policies(rdzv, pods, store, store.ports["rendezvous"])
            flows.append(rdzv)
            name, ip, port = CREDENTIALS[self.cloud]
            creds = Flow("credentials", pods.name, name, f"tcp {port}", f"{team}/training")
            self._policies(creds, pods, Address(name, ip), port)
            flows.append(creds)
            store = Flow(
                "checkpoints",
                pods.name,
                OBJECT_STORE[self.cloud],
                f"tcp {HTTPS}",
                f"{team}/training",
            )
            self._policies(store, pods, Address(OBJECT_STORE[self.cloud]), HTTPS)
            self._training_identity(store, team)
            flows.append(store)
        return flows

    def controllers(self) -> list[Flow]:
        """Each controller with a cloud identity -> the cloud API it calls."""
        flows = []
        for association in self._of("aws:eks/podIdentityAssociation:PodIdentityAssociation"):
            key = (association.inputs["namespace"], association.inputs["serviceAccount"])
            if key not in CONTROLLER_ACTIONS:
                continue
            api, actions = CONTROLLER_ACTIONS[key]
            flow = Flow("cloud API", f"{key[1]} ({key[0]})", api, f"tcp {HTTPS}", "/".join(key))
            self._policies(flow, Pods(key[1], key[0], {}), Address(api), HTTPS)
            role = self._aws_role_by_arn(association.inputs["roleArn"])
            self._aws_holds(flow, role, actions)
            flows.append(flow)
        return flows

    def registry(self) -> list[Flow]:
        """The nodes -> the image registry (the kubelet pulls as the node's identity)."""
        flow = Flow("image pull", "nodes", "image registry", f"tcp {HTTPS}", "the node identity")
        if self.cloud == "aws":
            role = next(
                r
                for r in self._of("aws:iam/role:Role")
                if "ec2.amazonaws.com" in r.inputs["assumeRolePolicy"]
            )
            self._aws_holds(flow, role, REGISTRY_PULL["aws"])
        else:
            account = next(
                a
                for a in self._of("gcp:serviceaccount/account:Account")
                if a.inputs["accountId"].endswith("gke-nodes")
            )
            member = f"serviceAccount:{account.outputs['email']}"
            self._gcp_holds(flow, [member], REGISTRY_PULL["gcp"], "the node service account")
        return [flow]

    def commands(self) -> list[Flow]:
        """Each role -> every command the docs give it, as the permission the command needs."""
        flows = []
        for scope in COMMAND_SCOPES:
            if self.cloud not in scope.clouds or not self._has_role(scope.role):
                continue
            if scope.needs and not self._of(scope.needs):
                continue
            for command in documented_commands(self.repo, scope):
                program = command.argv[0]
                if program in LOCAL_PROGRAMS and not is_cloud_drill(command):
                    continue
                if program in CLOUD_CLIS.values() and program != CLOUD_CLIS[self.cloud]:
                    continue
                flow = Flow(
                    "command",
                    scope.role,
                    command_name(command),
                    "-",
                    scope.role,
                    where=f"{command.runbook}: {command.line}",
                )
                who = next(
                    (w for p, w in scope.elsewhere.items() if " ".join(command.argv).startswith(p)),
                    None,
                )
                if who:
                    flow.identity = who
                    flow.opened_by.append(f"not a stack role: {who}")
                else:
                    self._may_run(flow, scope.role, command)
                flows.append(flow)
        return flows

    # -- the layers ------------------------------------------------------------------------

    def _from_control_plane(self, flow: Flow, pods: Pods, port: int) -> None:
        """The cloud's network from the control plane to a pod, then its NetworkPolicies."""
        if self.cloud == "gcp":
            cidr = self._control_plane_cidr()
            rules = [
                f"firewall {r.name}"
                for r in self._of("gcp:compute/firewall:Firewall")
                if r.inputs.get("direction", "INGRESS") == "INGRESS"
                and cidr in r.inputs.get("sourceRanges", [])
                and any(_allows(a, port) for a in r.inputs.get("allows", []))
            ]
            if port in GKE_CONTROL_PLANE_PORTS:
                rules.insert(0, "GKE's control-plane rule (tcp 443, 10250)")
            if rules:
                flow.layer(rules[0], None)
            else:
                flow.layer(
                    None,
                    "GKE firewall: the control plane reaches nodes on tcp 443 and 10250 only, and "
                    f"no rule from {cidr or 'its range'} opens tcp {port}",
                )
        else:
            flow.layer(*self._eks_cluster_security_group())
        self._policies(flow, Address("control plane", None), pods, port)

    def _in_cluster(self, flow: Flow) -> None:
        """Pod to pod: GKE's intra-cluster rules, EKS's cluster security group."""
        if self.cloud == "gcp":
            flow.layer("GKE's intra-cluster firewall rules (pod and node ranges)", None)
        else:
            flow.layer(*self._eks_cluster_security_group())

    def _eks_cluster_security_group(self) -> tuple[str | None, str | None]:
        """Every node in the cluster security group, which admits all traffic among members."""
        cluster = self._of("aws:eks/cluster:Cluster")[0]
        group = cluster.outputs["vpcConfig"]["clusterSecurityGroupId"]
        outside = [
            f"EC2NodeClass {c['metadata']['name']}"
            for c in self.rendered.objects
            if c["kind"] == "EC2NodeClass"
            and [t.get("id") for t in c["spec"]["securityGroupSelectorTerms"]] != [group]
        ] + [
            f"launch template {t.name}"
            for t in self._of("aws:ec2/launchTemplate:LaunchTemplate")
            if t.inputs.get("vpcSecurityGroupIds") not in (None, [group])
        ]
        if outside:
            return None, f"EKS security groups: {', '.join(outside)} outside {group}"
        return f"EKS cluster security group {group} (all nodes)", None

    def _policies(
        self, flow: Flow, source: Pods | Address, target: Pods | Address, port: int | None
    ) -> None:
        """Egress at the source's namespace, ingress at the destination's."""
        if isinstance(source, Pods):
            flow.layer(*self._policy_verdict("Egress", source, target, port))
        if isinstance(target, Pods):
            flow.layer(*self._policy_verdict("Ingress", target, source, port))

    def _policy_verdict(
        self, direction: str, local: Pods, peer: Pods | Address, port: int | None
    ) -> tuple[str | None, str | None]:
        applying = [
            p
            for p in self.policies
            if p["metadata"]["namespace"] == local.namespace
            and _selects(p["spec"].get("podSelector", {}), local.labels)
            and direction in _policy_types(p["spec"])
        ]
        if not applying:
            return f"no {direction.lower()} NetworkPolicy in {local.namespace}", None
        key, peers_key = direction.lower(), "from" if direction == "Ingress" else "to"
        named = local if direction == "Ingress" else peer
        for policy in applying:
            for rule in policy["spec"].get(key, []):
                if _ports_admit(rule.get("ports"), port, named) and any(
                    self._peer_matches(p, peer, local.namespace)
                    for p in rule.get(peers_key) or [{}]
                ):
                    return f"NetworkPolicy {local.namespace}/{policy['metadata']['name']}", None
        names = ", ".join(f"{local.namespace}/{p['metadata']['name']}" for p in applying)
        what = "any port" if port is None else f"tcp {port}"
        return None, f"NetworkPolicy {names}: no {key} rule admits {_describe(peer)} on {what}"

    def _peer_matches(self, peer: dict, other: Pods | Address, namespace: str) -> bool:
        if not peer:
            return True
        if "ipBlock" in peer:
            block = peer["ipBlock"]
            if isinstance(other, Pods):
                return False
            if other.ip is None:
                return block["cidr"] in ("0.0.0.0/0", "::/0") and not block.get("except")
            address = ipaddress.ip_address(other.ip)
            return address in ipaddress.ip_network(block["cidr"]) and not any(
                address in ipaddress.ip_network(e) for e in block.get("except", [])
            )
        if not isinstance(other, Pods):
            return False
        if "namespaceSelector" in peer:
            labels = {
                **self.namespaces.get(other.namespace, {}),
                "kubernetes.io/metadata.name": other.namespace,
            }
            if not _selects(peer["namespaceSelector"], labels):
                return False
        elif other.namespace != namespace:
            return False
        return _selects(peer.get("podSelector", {}), other.labels)

    def _training_identity(self, flow: Flow, team: str) -> None:
        """The team's training service account -> its cloud identity -> the checkpoint calls."""
        actions = CHECKPOINT_ACTIONS[self.cloud]
        if self.cloud == "aws":
            association = next(
                (
                    a
                    for a in self._of("aws:eks/podIdentityAssociation:PodIdentityAssociation")
                    if (a.inputs["namespace"], a.inputs["serviceAccount"]) == (team, "training")
                ),
                None,
            )
            if association is None:
                flow.layer(None, f"IAM: no Pod Identity association for {team}/training")
                return
            self._aws_holds(flow, self._aws_role_by_arn(association.inputs["roleArn"]), actions)
            return
        email = (
            self.teams[team]["metadata"]
            .get("annotations", {})
            .get("iam.gke.io/gcp-service-account")
        )
        bound = [
            b
            for b in self._of("gcp:serviceaccount/iAMMember:IAMMember")
            if b.inputs["role"] == "roles/iam.workloadIdentityUser"
            and b.inputs["member"].endswith(f"[{team}/training]")
            and email
            and b.inputs["serviceAccountId"].endswith(f"/{email}")
        ]
        if not bound:
            flow.layer(None, f"IAM: {team}/training is bound to no Google service account")
            return
        flow.layer(f"Workload Identity binding {bound[0].name}", None)
        self._gcp_holds(flow, [f"serviceAccount:{email}"], actions, f"{team}'s training account")

    def _may_run(self, flow: Flow, role: str, command: Command) -> None:
        program = command.argv[0]
        subcommand = subcommand_of(command.argv) if program != "spotctl" else "drill"
        if program == "kubectl":
            verb = KUBECTL_RBAC.get(subcommand or "")
            if verb is None:
                flow.layer(None, f"mapping: kubectl {subcommand} has no RBAC verb")
                return
            flow.port = f"RBAC {verb}"
            self._kubectl(flow, role, verb)
            return
        if program == "spotctl":
            needed = CLOUD_DRILL[self.cloud]
        elif program == "aws":
            needed = AWS_ACTIONS.get(subcommand or "")
        else:
            needed = GCLOUD_PERMISSIONS.get(subcommand or "")
        if needed is None:
            flow.layer(None, f"mapping: {program} {subcommand} maps to no permission")
            return
        flow.port = ", ".join(needed)
        if self.cloud == "aws":
            role_resource = self._aws_role(role)
            if needed == ("trust",):
                trusted = json.loads(role_resource.inputs["assumeRolePolicy"])
                flow.layer(
                    f"trust policy of {role_resource.name}" if trusted["Statement"] else None,
                    None if trusted["Statement"] else f"IAM: {role} trusts no one",
                )
                return
            self._aws_holds(flow, role_resource, needed)
        else:
            self._gcp_holds(flow, self._gcp_members(role), needed, role)

    def _kubectl(self, flow: Flow, role: str, verb: str) -> None:
        if self.cloud == "aws":
            arn = self._aws_role(role).outputs["arn"]
            policies = [
                EKS_ACCESS_POLICIES[a.inputs["policyArn"].rsplit("/", 1)[-1]]
                for a in self._of("aws:eks/accessPolicyAssociation:AccessPolicyAssociation")
                if a.inputs["principalArn"] == arn
            ]
            source = "EKS access policy"
        else:
            members = self._gcp_members(role)
            grants = self._gcp_grants(members)
            if any(fnmatch.fnmatch("container.pods.create", g) for _, g in grants):
                flow.layer("GKE IAM: roles/container.admin (every Kubernetes object)", None)
                return
            policies = [
                b["roleRef"]["name"]
                for b in self.rendered.objects
                if b["kind"] == "RoleBinding"
                and any(
                    s.get("name") in {m.split(":", 1)[-1] for m in members}
                    for s in b.get("subjects", [])
                )
            ]
            source = "RoleBinding to"
        granting = [
            p for p in policies if p == "cluster-admin" or verb in CLUSTER_ROLE_VERBS.get(p, set())
        ]
        flow.layer(
            f"{source} {granting[0]}" if granting else None,
            None if granting else f"RBAC: {role} holds no role with verb {verb!r}",
        )

    # -- IAM ---------------------------------------------------------------------------

    def _has_role(self, role: str) -> bool:
        if self.cloud == "aws":
            return self._aws_role(role) is not None
        return bool(self._gcp_members(role))

    def _aws_role(self, role: str) -> PreviewResource | None:
        """The stack's role for a person: a team engineer holds the team's ml-engineer role
        (one team's stands for all: each edits its own namespace the same way)."""
        if role == "team-engineer":
            return next(
                (r for r in self._of("aws:iam/role:Role") if "-roles-ml-engineer-" in r.name), None
            )
        return next(
            (r for r in self._of("aws:iam/role:Role") if r.name.endswith(f"-roles-{role}")), None
        )

    def _aws_role_by_arn(self, arn: str) -> PreviewResource:
        return next(r for r in self._of("aws:iam/role:Role") if r.outputs.get("arn") == arn)

    def _aws_holds(self, flow: Flow, role: PreviewResource, actions: Iterable[str]) -> None:
        """Opened by the statements (Sid) or managed policies that allow the actions."""
        statements = []
        for policy in self._of("aws:iam/rolePolicy:RolePolicy"):
            if policy.inputs["role"] in (role.id, role.outputs.get("name")):
                document = policy.inputs["policy"]
                statements += _statements(
                    json.loads(document) if isinstance(document, str) else document
                )
        for attachment in self._of("aws:iam/rolePolicyAttachment:RolePolicyAttachment"):
            if attachment.inputs["role"] in (role.id, role.outputs.get("name")):
                managed = attachment.inputs["policyArn"].rsplit("/", 1)[-1]
                statements.append(
                    {
                        "Sid": managed,
                        "Effect": "Allow",
                        "Action": list(AWS_MANAGED_ACTIONS.get(managed, ())),
                    }
                )
        missing = [a for a in actions if not _aws_allowing(statements, a)]
        granting = dict.fromkeys(
            s.get("Sid", "?") for a in actions for s in _aws_allowing(statements, a)[:1]
        )
        flow.layer(
            f"IAM role {role.name}: {', '.join(granting)}",
            f"IAM: role {role.name} lacks {', '.join(missing)}" if missing else None,
        )

    def _gcp_members(self, role: str) -> list[str]:
        if role == "team-engineer":
            return sorted(
                {
                    f"{s['kind'].lower()}:{s['name']}"
                    for b in self.rendered.objects
                    if b["kind"] == "RoleBinding" and b["roleRef"]["name"] == "edit"
                    for s in b.get("subjects", [])
                }
            )
        return sorted(
            {
                m.inputs["member"]
                for m in self._of("gcp:projects/iAMMember:IAMMember")
                if f"-groups-{role}-" in m.name
            }
        )

    def _gcp_grants(self, members: list[str]) -> list[tuple[str, str]]:
        """(role, permission or pattern) of every role bound to the members."""
        custom = {
            r.outputs.get("name"): r.inputs["permissions"]
            for r in self._of("gcp:projects/iAMCustomRole:IAMCustomRole")
        }
        return [
            (binding.inputs["role"], permission)
            for binding in [
                *self._of("gcp:projects/iAMMember:IAMMember"),
                *self._of("gcp:storage/bucketIAMMember:BucketIAMMember"),
            ]
            if binding.inputs["member"] in members
            for permission in custom.get(binding.inputs["role"])
            or PREDEFINED_PERMISSIONS.get(binding.inputs["role"], ())
        ]

    def _gcp_holds(
        self, flow: Flow, members: list[str], permissions: Iterable[str], who: str
    ) -> None:
        """Opened by the roles that grant the permissions."""
        grants = self._gcp_grants(members)
        granting = {p: [r for r, g in grants if fnmatch.fnmatch(p, g)] for p in permissions}
        missing = [p for p, roles in granting.items() if not roles]
        roles = dict.fromkeys(roles[0] for roles in granting.values() if roles)
        flow.layer(
            f"IAM ({who}): {', '.join(roles)}",
            f"IAM: {who} lacks {', '.join(missing)}" if missing else None,
        )

    # -- the stack's parts -------------------------------------------------------------

    def _of(self, token: str) -> list[PreviewResource]:
        return [r for r in self.resources if r.type == token]

    def _control_plane_cidr(self) -> str | None:
        clusters = self._of("gcp:container/cluster:Cluster")
        if not clusters:
            return None  # an attached cluster: only GKE's own rule is known
        return clusters[0].inputs["privateClusterConfig"]["masterIpv4CidrBlock"]

    def training_pods(self) -> list[Pods]:
        """Each team's training pods, from its Job templates (the first of them: all of a
        team's templates share labels and ports)."""
        found = {}
        for (namespace, _), docs in sorted(self.rendered.templates.items()):
            if namespace in found:
                continue
            for pod in _pod_templates(docs):
                ports = {
                    p["name"]: p["containerPort"]
                    for c in pod["spec"]["containers"]
                    for p in c.get("ports", [])
                }
                found[namespace] = Pods(
                    f"training pods ({namespace})",
                    namespace,
                    pod["metadata"].get("labels", {}),
                    ports,
                )
                break
        return list(found.values())

    def _rendezvous(self, namespace: str) -> Pods:
        store = next(
            o
            for o in self.rendered.objects
            if o["kind"] == "Deployment" and o["metadata"]["namespace"] == namespace
        )
        pod = store["spec"]["template"]
        ports = {
            p["name"]: p["containerPort"]
            for c in pod["spec"]["containers"]
            for p in c.get("ports", [])
        }
        return Pods(
            f"rendezvous store ({namespace})", namespace, pod["metadata"].get("labels", {}), ports
        )


# Charts whose values and templates define no admission webhook (their values.yaml in
# ../shared/schemas: Karpenter 1.x serves none, the device plugins and the node termination
# handler are DaemonSets without one); karpenter-crd installs only CRDs.
CHARTS_WITHOUT_WEBHOOKS = (
    "karpenter",
    "karpenter-crd",
    "nvidia-device-plugin",
    "aws-efa-k8s-device-plugin",
    "aws-node-termination-handler",
)


def command_name(command: Command) -> str:
    """`aws fis start-experiment`, `kubectl logs`, `spotctl drill --cloud-run`."""
    if is_cloud_drill(command):
        return "spotctl drill --cloud-run"
    program = command.argv[0]
    return f"{program} {subcommand_of(command.argv) or ' '.join(command.argv[1:3])}"


def is_cloud_drill(command: Command) -> bool:
    return command.argv[:2] == ("spotctl", "drill") and "--cloud-run" in command.argv


def documented_commands(repo: Path, scope: CommandScope) -> list[Command]:
    paths = (
        sorted((repo / scope.path).glob("*.md"))
        if scope.path.endswith("/")
        else [repo / scope.path]
    )
    found = []
    for path in paths:
        text = path.read_text()
        if scope.section is not None:
            text = _section(text, scope.section)
        found += commands_in(text, str(path.relative_to(repo)))
    return found


def _section(text: str, heading: str) -> str:
    pattern = rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)"
    match = re.search(pattern, text, re.MULTILINE | re.DOTALL)
    assert match, f"no section {heading!r}"
    return match.group(1)


def _pod_templates(docs: list[dict]) -> Iterable[dict]:
    """The pod templates of Jobs and JobSets."""
    for doc in docs:
        if doc.get("kind") == "Job":
            yield doc["spec"]["template"]
        elif doc.get("kind") == "JobSet":
            for job in doc["spec"]["replicatedJobs"]:
                yield job["template"]["spec"]["template"]


def _selects(selector: dict, labels: Mapping[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        key, values = expression["key"], expression.get("values", [])
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[expression["operator"]]
        if not ok:
            return False
    return True


def _policy_types(spec: dict) -> list[str]:
    """policyTypes, or as the API server defaults it: Ingress, and Egress if egress rules exist."""
    return spec.get("policyTypes") or ["Ingress", *(["Egress"] if "egress" in spec else [])]


def _ports_admit(ports: list[dict] | None, port: int | None, pods: Pods | Address) -> bool:
    """Whether a rule's ports admit `port` (None: every port, as collectives need)."""
    if not ports:
        return True
    if port is None:
        return False
    for entry in ports:
        if entry.get("protocol", "TCP") != "TCP":
            continue
        value = entry.get("port")
        if value is None:
            return True
        if isinstance(value, str):
            value = pods.ports.get(value) if isinstance(pods, Pods) else None
            if value == port:
                return True
            continue
        if value <= port <= entry.get("endPort", value):
            return True
    return False


def _allows(allow: dict, port: int) -> bool:
    if allow["protocol"] not in ("tcp", "all"):
        return False
    for spec in allow.get("ports") or ["0-65535"]:
        low, _, high = str(spec).partition("-")
        if int(low) <= port <= int(high or low):
            return True
    return False


def _statements(document: dict) -> list[dict]:
    statements = document["Statement"]
    return statements if isinstance(statements, list) else [statements]


def _aws_allowing(statements: list[dict], action: str) -> list[dict]:
    """The Allow statements that grant the action; none if a Deny names it."""

    def names(statement: dict) -> bool:
        actions = statement.get("Action", [])
        actions = [actions] if isinstance(actions, str) else actions
        return any(fnmatch.fnmatch(action.lower(), a.lower()) for a in actions)

    if any(s["Effect"] == "Deny" and names(s) for s in statements):
        return []
    return [s for s in statements if s["Effect"] == "Allow" and names(s)]


def _describe(peer: Pods | Address) -> str:
    if isinstance(peer, Pods):
        return f"{peer.name} ({peer.namespace})"
    return f"{peer.name}" + (f" {peer.ip}" if peer.ip else "")


def _once(flow: Flow) -> Flow:
    """A flow checked port by port lists each opening rule and each blocking reason once."""
    flow.opened_by = list(dict.fromkeys(flow.opened_by))
    flow.blocked_by = list(dict.fromkeys(flow.blocked_by))
    return flow


def table(stacks: Iterable[Flows]) -> str:
    """One Markdown table of every flow of the stacks and what opens it, a row per flow that
    reads the same on several stacks or teams."""
    rows: dict[tuple[str, ...], list[str]] = {}
    for stack in stacks:
        for flow in stack.all():
            key = tuple(
                stack.generic(text)
                for text in (
                    flow.kind,
                    flow.source,
                    flow.destination,
                    flow.port,
                    flow.identity,
                    "; ".join(flow.opened_by),
                )
            )
            rows.setdefault(key, [])
            if stack.stack not in rows[key]:
                rows[key].append(stack.stack)
    lines = [
        "| flow | from | to | port or permission | as | opened by | stacks |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, names in sorted(rows.items()):
        cells = [cell.replace("|", "\\|") for cell in key]
        lines.append("| " + " | ".join([*cells, ", ".join(sorted(names))]) + " |")
    return "\n".join(lines)
