"""A team's namespace: its quota, container defaults and the service account training runs as."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from components.k8s.jobs import MAX_LOCAL_RANKS, METRICS_PORT


@dataclass(frozen=True)
class TeamNamespaceArgs:
    team: str
    namespace: str
    gpus: int
    cpu: str
    memory: str
    # The account training pods run as; the cloud binds it to the team's training identity.
    service_account: str = "training"
    gpu_resource: str = "nvidia.com/gpu"
    # Applied to containers that set no requests or limits themselves.
    default_cpu: str = "500m"
    default_memory: str = "1Gi"
    service_account_annotations: dict[str, str] = field(default_factory=dict)
    # Prometheus scrapes training pods from here.
    monitoring_namespace: str = "monitoring"
    # NetworkPolicy peers of the cloud's own collectors that scrape the training pods too.
    metrics_scrapers: tuple[dict, ...] = ()
    # ClusterRole -> RBAC subjects bound to it in this namespace only (where the cloud's own
    # access control does not scope people to a namespace: GKE).
    role_bindings: dict[str, list[dict]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.gpus < 0:
            raise ValueError(f"team {self.team!r}: gpus must be >= 0, got {self.gpus}")


class TeamNamespace(pulumi.ComponentResource):
    """Namespace + ResourceQuota + LimitRange + the team's training ServiceAccount."""

    def __init__(
        self, name: str, args: TeamNamespaceArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:namespaces:TeamNamespace", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        labels = {"app.kubernetes.io/part-of": "spot-training", "spot-training/team": args.team}
        namespace = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata={
                "name": args.namespace,
                # Training pods run non-root with a read-only root; enforce it for every pod.
                "labels": {**labels, "pod-security.kubernetes.io/enforce": "restricted"},
            },
            opts=child,
        )
        in_namespace = pulumi.ResourceOptions(parent=self, depends_on=[namespace])
        k8s.core.v1.ResourceQuota(
            f"{name}-quota",
            metadata={"name": "team-quota", "namespace": args.namespace, "labels": labels},
            spec={
                "hard": {
                    f"requests.{args.gpu_resource}": str(args.gpus),
                    "requests.cpu": args.cpu,
                    "requests.memory": args.memory,
                    "limits.memory": args.memory,
                }
            },
            opts=in_namespace,
        )
        k8s.core.v1.LimitRange(
            f"{name}-limits",
            metadata={"name": "container-defaults", "namespace": args.namespace, "labels": labels},
            spec={
                "limits": [
                    {
                        "type": "Container",
                        "defaultRequest": {"cpu": args.default_cpu, "memory": args.default_memory},
                        "default": {"cpu": args.default_cpu, "memory": args.default_memory},
                    }
                ]
            },
            opts=in_namespace,
        )
        k8s.core.v1.ServiceAccount(
            f"{name}-training-sa",
            metadata={
                "name": args.service_account,
                "namespace": args.namespace,
                "labels": labels,
                "annotations": args.service_account_annotations,
            },
            automount_service_account_token=False,
            opts=in_namespace,
        )
        # Ranks of a run talk to each other (rendezvous, collectives); from outside, only
        # Prometheus and the cloud's collectors may reach the pods, on their metrics ports.
        k8s.networking.v1.NetworkPolicy(
            f"{name}-network-policy",
            metadata={"name": "team-pods", "namespace": args.namespace, "labels": labels},
            spec={
                "podSelector": {},
                "policyTypes": ["Ingress"],
                "ingress": [
                    {"from": [{"podSelector": {}}]},
                    {
                        "from": [
                            {
                                "namespaceSelector": {
                                    "matchLabels": {
                                        "kubernetes.io/metadata.name": args.monitoring_namespace
                                    }
                                }
                            },
                            *args.metrics_scrapers,
                        ],
                        # Local rank r serves METRICS_PORT + r.
                        "ports": [
                            {
                                "port": METRICS_PORT,
                                "endPort": METRICS_PORT + MAX_LOCAL_RANKS - 1,
                                "protocol": "TCP",
                            }
                        ],
                    },
                ],
            },
            opts=in_namespace,
        )
        for role, subjects in args.role_bindings.items():
            k8s.rbac.v1.RoleBinding(
                f"{name}-{role}",
                metadata={"name": f"team-{role}", "namespace": args.namespace, "labels": labels},
                role_ref={
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": role,
                },
                subjects=subjects,
                opts=in_namespace,
            )
        self.namespace = namespace.metadata.apply(lambda m: m["name"])
        self.register_outputs({"namespace": self.namespace})
