"""The cloud-neutral contract between a cloud's layer and the Kubernetes layer.

Each cloud (`components/aws`, later `components/gcp`) builds its network, cluster, pools, storage
and identities, and hands back one `Platform`. The Kubernetes layer consumes only this object, so
it never needs to know which cloud it runs on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi


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
    # What the Kubernetes layer must wait for before it installs anything: the cluster, its
    # add-ons, and the stable nodes its Helm releases schedule on.
    ready: list[pulumi.Resource] = field(default_factory=list)
    # Annotations the team's training service account needs for its workload identity, by team.
    service_account_annotations: dict[str, dict[str, str]] = field(default_factory=dict)
    # AWS: the queue the interruption handler reads; None where the cloud has none.
    interruption_queue_url: pulumi.Input[str] | None = None
