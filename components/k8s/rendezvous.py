"""A team's rendezvous store: where its multi-node runs meet, on capacity that is not preempted.

torchrun's c10d rendezvous keeps its state in a TCPStore. Hosted by one of the training pods, it
dies with that pod's node, and every other node of the run fails with it. Here one small pod per
team namespace hosts it (`python -m spotsafe.rendezvous`, from the team's training image) on
the stable on-demand tier, at the priority of services that training never preempts. Each run
keeps its state under its own id (the Job's uid), so one store serves all of a team's runs.

A Deployment of one replica behind a Service, replaced with `Recreate`: two stores behind one
Service would split a run's agents between two rendezvous.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from components.k8s.jobs import PART_OF, RUN_AS_GID, RUN_AS_UID
from components.k8s.placement import Placement
from components.k8s.priorities import SERVICES

NAME = "training-rendezvous"
PORT = 29400
# The store's requests; the team's namespace quota leaves room for them.
CPU_MILLI = 100
MEMORY_MI = 512


def rendezvous_endpoint(namespace: str) -> str:
    """host:port of the store that serves `namespace`, for torchrun's --rdzv-endpoint."""
    return f"{NAME}.{namespace}.svc:{PORT}"


@dataclass(frozen=True)
class RendezvousStoreArgs:
    namespace: str
    # Any image with torch and spotsafe: the team's training image.
    image: pulumi.Input[str]
    # Where it runs: the stable tier.
    placement: Placement
    priority_class: str = SERVICES
    labels: dict[str, str] = field(default_factory=dict)
    # 0 until the training image is built: a store that cannot pull its image would hold up the
    # `pulumi up` that waits for it to be ready.
    replicas: int = 1

    def __post_init__(self) -> None:
        if self.replicas not in (0, 1):
            raise ValueError(
                f"RendezvousStoreArgs.replicas: 0 or 1, got {self.replicas}: two stores would "
                "split a run's agents between two rendezvous"
            )


def rendezvous_objects(args: RendezvousStoreArgs) -> list[dict]:
    """The store's Deployment and Service."""
    selector = {"app.kubernetes.io/name": NAME}
    labels = {**PART_OF, **selector, **args.labels}
    metadata = {"name": NAME, "namespace": args.namespace, "labels": labels}
    port = {"tcpSocket": {"port": "rendezvous"}, "periodSeconds": 10}
    pod = {
        "priorityClassName": args.priority_class,
        "automountServiceAccountToken": False,
        "nodeSelector": dict(args.placement.node_labels),
        "tolerations": args.placement.tolerations(),
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_UID,
            "runAsGroup": RUN_AS_GID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": "store",
                "image": args.image,
                "imagePullPolicy": "Always",
                "command": ["python", "-m", "spotsafe.rendezvous", "--port", str(PORT)],
                "ports": [{"name": "rendezvous", "containerPort": PORT, "protocol": "TCP"}],
                "readinessProbe": port,
                "livenessProbe": {**port, "failureThreshold": 6},
                "resources": {
                    "requests": {"cpu": f"{CPU_MILLI}m", "memory": f"{MEMORY_MI}Mi"},
                    "limits": {"cpu": "1", "memory": f"{MEMORY_MI}Mi"},
                },
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "runAsNonRoot": True,
                    "capabilities": {"drop": ["ALL"]},
                },
                "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
            }
        ],
        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}],
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": args.replicas,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "selector": selector,
            "ports": [
                {"name": "rendezvous", "port": PORT, "targetPort": "rendezvous", "protocol": "TCP"}
            ],
        },
    }
    return [deployment, service]


class RendezvousStore(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: RendezvousStoreArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:rendezvous:RendezvousStore", name, None, opts)
        deployment, service = rendezvous_objects(args)
        # Waits for what the component waits for: the team's namespace.
        child = pulumi.ResourceOptions(parent=self, depends_on=opts.depends_on if opts else None)
        k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata=deployment["metadata"],
            spec=deployment["spec"],
            opts=child,
        )
        k8s.core.v1.Service(
            f"{name}-service", metadata=service["metadata"], spec=service["spec"], opts=child
        )
        self.endpoint = rendezvous_endpoint(args.namespace)
        self.register_outputs({"endpoint": self.endpoint})
