"""Each policy threshold beside the value a stack actually has, per resource: how far the stack is
from the line the pack draws (negative headroom: over it)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from spotctl.preview.resources import PreviewResource

NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
LIFECYCLE = "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration"
GCP_KEY = "gcp:kms/cryptoKey:CryptoKey"
GCS_BUCKET = "gcp:storage/bucket:Bucket"


def dig(value: Any, *path: str, default: Any = None) -> Any:
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return default if value is None else value


@dataclass(frozen=True)
class Measure:
    policy: str
    setting: str
    bound: str  # "min": the stack must have at least the threshold; "max": at most
    measure: Callable[[PreviewResource], float | None]  # None: the policy does not apply


def _requirement(pool: PreviewResource, key: str) -> list:
    requirements = dig(pool.inputs, "spec", "template", "spec", "requirements", default=[])
    return next((r.get("values", []) for r in requirements if r.get("key") == key), [])


def _spot_pool(measure: Callable[[PreviewResource], float]) -> Callable:
    def of(resource: PreviewResource) -> float | None:
        if resource.type != NODE_POOL:
            return None
        if "spot" not in _requirement(resource, "karpenter.sh/capacity-type"):
            return None
        return measure(resource)

    return of


def _spot_group(prop: str) -> Callable:
    def of(resource: PreviewResource) -> float | None:
        if resource.type != NODE_GROUP or resource.inputs.get("capacityType") != "SPOT":
            return None
        return len(resource.inputs.get(prop) or [])

    return of


def _hop_limit(resource: PreviewResource) -> float | None:
    if resource.type == "aws:ec2/launchTemplate:LaunchTemplate":
        return dig(resource.inputs, "metadataOptions", "httpPutResponseHopLimit")
    if resource.type == "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass":
        return dig(resource.inputs, "spec", "metadataOptions", "httpPutResponseHopLimit", default=1)
    return None


def _lifecycle_days(*path: str) -> Callable:
    def of(resource: PreviewResource) -> float | None:
        if resource.type != LIFECYCLE:
            return None
        days = [dig(rule, *path) for rule in resource.inputs.get("rules", [])]
        days = [d for d in days if isinstance(d, int | float)]
        return max(days) if days else None

    return of


def _rotation_days(resource: PreviewResource) -> float | None:
    period = resource.inputs.get("rotationPeriod") if resource.type == GCP_KEY else None
    return float(period.rstrip("s")) / 86400 if isinstance(period, str) else None


def _soft_delete_days(resource: PreviewResource) -> float | None:
    if resource.type != GCS_BUCKET:
        return None
    seconds = dig(resource.inputs, "softDeletePolicy", "retentionDurationSeconds", default=0)
    return float(seconds) / 86400


MEASURES = (
    Measure(
        "karpenter-spot-pool-diversified",
        "minInstanceTypes",
        "min",
        _spot_pool(lambda pool: len(_requirement(pool, "node.kubernetes.io/instance-type"))),
    ),
    Measure(
        "karpenter-spot-pool-diversified",
        "minZones",
        "min",
        _spot_pool(lambda pool: len(_requirement(pool, "topology.kubernetes.io/zone"))),
    ),
    Measure("eks-spot-pool-diversified", "minInstanceTypes", "min", _spot_group("instanceTypes")),
    Measure("eks-spot-pool-diversified", "minSubnets", "min", _spot_group("subnetIds")),
    Measure("ec2-imds-pods-kept-out", "maxHopLimit", "max", _hop_limit),
    Measure(
        "s3-bucket-lifecycle",
        "maxNoncurrentDays",
        "max",
        _lifecycle_days("noncurrentVersionExpiration", "noncurrentDays"),
    ),
    Measure(
        "s3-bucket-lifecycle",
        "maxAbortMultipartDays",
        "max",
        _lifecycle_days("abortIncompleteMultipartUpload", "daysAfterInitiation"),
    ),
    Measure("gcp-kms-key-rotation", "maxRotationDays", "max", _rotation_days),
    Measure("gcs-bucket-soft-delete", "minSoftDeleteDays", "min", _soft_delete_days),
)


def headroom(
    resources: Iterable[PreviewResource], config: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """One row per measured resource: the threshold the pack ran with (`config`, as the policy
    report carries it), the actual value and the headroom."""
    rows = []
    for resource in resources:
        for m in MEASURES:
            actual = m.measure(resource)
            threshold = config.get(m.policy, {}).get(m.setting)
            if actual is None or threshold is None:
                continue
            room = actual - threshold if m.bound == "min" else threshold - actual
            rows.append(
                {
                    "policy": m.policy,
                    "setting": m.setting,
                    "bound": m.bound,
                    "threshold": threshold,
                    "resource": resource.name,
                    "actual": actual,
                    "headroom": room,
                }
            )
    return rows
