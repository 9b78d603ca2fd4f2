"""The cloud-neutral contract between a cloud's layer and the Kubernetes layer.

Each cloud (`components/aws`, `components/gcp`) builds its network, cluster, pools, storage
and identities, and hands back one `Platform`. The Kubernetes layer consumes only this object, so
it never needs to know which cloud it runs on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi

from components.k8s.monitoring import StorageClassSpec

# A cloud's own add-on on the cluster (its node provisioner, say), built by the Kubernetes layer
# on its provider: called with a resource name and the options to build it with.
ClusterAddon = Callable[[str, pulumi.ResourceOptions], pulumi.ComponentResource]


@dataclass(frozen=True)
class Platform:
    cloud: str
    region: str
    # Credentials for the cluster's Kubernetes provider (a secret output).
    kubeconfig: pulumi.Output[str]
    # Where each team's runs checkpoint, e.g. "s3://<bucket>/<team prefix>", by team name.
    checkpoint_roots: dict[str, pulumi.Input[str]]
    # Seconds from a termination notice to the kill for a training pod, and the notice sources
    # the runtime watches besides SIGTERM's.
    notice_seconds: int
    notice_sources: tuple[str, ...]
    # Where the training image lives (registry host and repository, no tag or digest); the Job
    # templates pin an image there by digest.
    image_repository: pulumi.Input[str]
    # Alertmanager receiver settings that deliver to the cloud's alert targets (AWS: the alert
    # topic through SNS, signed with the role bound to Alertmanager's service account).
    alert_receiver: dict[str, Any]
    # How late the drain's SIGTERM may follow the notice (the runtime subtracts it).
    notice_lag_seconds: int = 0
    # Alertmanager receiver settings of the cloud's dead man's switch, which the always-firing
    # heartbeat alert goes to (AWS: a topic whose silence trips a CloudWatch alarm); None: the
    # heartbeat goes nowhere.
    heartbeat_receiver: dict[str, Any] | None = None
    # The StorageClass the platform creates for Prometheus's volume (AWS: encrypted gp3 through
    # the EBS CSI driver); None: the cluster's default class.
    storage_class: StorageClassSpec | None = None
    # What the Kubernetes layer must wait for before it installs anything: the cluster, its
    # add-ons, the stable nodes its Helm releases schedule on, and the cloud identities bound to
    # the service accounts of what it installs.
    ready: list[pulumi.Resource] = field(default_factory=list)
    # Annotations the team's training service account needs for its workload identity, by team.
    service_account_annotations: dict[str, dict[str, str]] = field(default_factory=dict)
    # Add-ons the Kubernetes layer builds first, by name suffix (EKS: Karpenter and its pools).
    addons: Mapping[str, ClusterAddon] = field(default_factory=dict)
    # By team: ClusterRole -> RBAC subjects bound in the team's namespace (GKE: the team's
    # engineers edit, log readers view; EKS scopes people with access entries instead).
    team_role_bindings: Mapping[str, Mapping[str, list[dict]]] = field(default_factory=dict)
    # Annotations every training pod carries, e.g. the provisioner's "never move a running pod".
    training_pod_annotations: dict[str, str] = field(default_factory=dict)
    # Whether the Kubernetes layer installs the NVIDIA device plugin (GKE brings its own, with its
    # GPU driver installation). GPU utilisation comes from each cloud's own DCGM exporter, one per
    # GPU node (EKS: the CloudWatch observability add-on's; GKE: its managed DCGM metrics), and
    # feeds its GpuIdleHigh alarm.
    needs_device_plugin: bool = True
    # Instance types whose nodes get EFA interfaces for the pods that request them, where the
    # Kubernetes layer installs the EFA device plugin (EKS; none: no plugin).
    efa_instance_types: tuple[str, ...] = ()
    # NetworkPolicy peers (namespace and pod selectors) of the cloud's own metrics collectors,
    # which the team namespaces admit on the training pods' metrics ports (GKE: Managed
    # Prometheus's collectors); none: only the cluster's Prometheus scrapes them.
    metrics_scrapers: tuple[dict, ...] = ()
    # The node label (and taint key) by which pods select a GPU class's node class, valued with
    # the class name, where the cloud orders spot before on-demand that way (GKE's ComputeClass).
    compute_class_label: str | None = None
