"""Identity on GCP: no long-lived keys (nodes and pods get short-lived tokens: node service
accounts, Workload Identity Federation for GKE; a key file is a credential that never expires),
a workload's bucket access limited to its team's prefix, and nothing that names the Workload
Identity pool before the cluster that creates it."""

from __future__ import annotations

import json
import re

from policies.inputs import of_type
from policies.rule import MANDATORY, ResourceRule, StackRule

KEY_TYPES = {
    "gcp:serviceaccount/key:Key": "service account key",
    "gcp:storage/hmacKey:HmacKey": "HMAC key for a service account",
}


def _check_no_keys(args, report_violation, _settings) -> None:
    what = KEY_TYPES.get(args.resource_type)
    if what is not None:
        report_violation(
            f"'{args.name}' creates a {what}; use Workload Identity Federation for GKE instead"
        )


BUCKET_GRANTS = (
    "gcp:storage/bucketIAMMember:BucketIAMMember",
    "gcp:storage/bucketIAMBinding:BucketIAMBinding",
)
# An IAM condition that keeps a grant to objects under one prefix, ending in '/' (so that
# `teams/vision` never reaches `teams/vision-2/...`).
PREFIX_SCOPED = re.compile(
    r'resource\.name\.startsWith\("projects/_/buckets/[^/"]+/objects/[^"]+/"\)'
)


def _check_prefix_scoped(args, report_violation, _settings) -> None:
    if args.resource_type not in BUCKET_GRANTS:
        return
    inputs = args.props
    members = [inputs.get("member")] + list(inputs.get("members") or [])
    workloads = [m for m in members if isinstance(m, str) and m.startswith("serviceAccount:")]
    if not workloads:
        return
    expression = (inputs.get("condition") or {}).get("expression") or ""
    if not PREFIX_SCOPED.search(expression):
        report_violation(
            f"'{args.name}' grants {inputs.get('role')} on the bucket to {', '.join(workloads)} "
            "without a condition to one prefix ending in '/' (resource.name.startsWith("
            '"projects/_/buckets/<bucket>/objects/<prefix>/")): a workload would reach '
            "every team's checkpoints"
        )


CLUSTER = "gcp:container/cluster:Cluster"
# A project's Workload Identity pool, as IAM members name it: PROJECT.svc.id.goog[ns/ksa].
POOL = ".svc.id.goog"


def _waits_for(resource, target) -> bool:
    """Whether `resource` is created after `target`: through its dependencies or its parents'."""
    seen, stack = set(), [resource]
    while stack:
        current = stack.pop()
        if current.urn in seen:
            continue
        seen.add(current.urn)
        if current.urn == target.urn and current is not resource:
            return True
        stack += [*(current.dependencies or []), *([current.parent] if current.parent else [])]
    return False


def _check_pool_after_cluster(args, report_violation, _settings) -> None:
    clusters = of_type(args.resources, CLUSTER)
    for resource in args.resources:
        if resource.resource_type == CLUSTER:
            continue
        for field, value in (resource.props or {}).items():
            if POOL not in json.dumps(value, default=str):
                continue
            for cluster in clusters:
                if not _waits_for(resource, cluster):
                    report_violation(
                        f"'{resource.name}' {field} names a Workload Identity pool but does not "
                        f"wait for cluster '{cluster.name}', which creates it: the first "
                        "`pulumi up` fails with 'Identity Pool does not exist'",
                        resource.urn,
                    )


POLICIES = [
    ResourceRule(
        "gcp-no-service-account-keys",
        "No service account keys or HMAC keys are created.",
        "A key is a long-lived credential that leaks with any file it is copied into; pods and "
        "nodes get short-lived tokens instead.",
        _check_no_keys,
        MANDATORY,
        fix=(
            "Delete the key resource; pods use Workload Identity and people their own credentials, "
            "so no key is needed."
        ),
    ),
    ResourceRule(
        "gcs-workload-prefix-scoped",
        "A service account's grant on a bucket is conditioned to one object prefix.",
        "Each team's training identity may use only its own checkpoint prefix; an unconditioned "
        "grant reaches every team's checkpoints (counterpart of iam-workload-prefix-scoped).",
        _check_prefix_scoped,
        MANDATORY,
        fix=(
            "Add an IAM condition to the bucket grant that limits it to the team's prefix "
            "(resource.name.startsWith('projects/_/buckets/<bucket>/objects/<prefix>/')), as "
            "components/gcp/iam.py writes it."
        ),
    ),
    StackRule(
        "gke-workload-pool-after-cluster",
        "What names the Workload Identity pool (PROJECT.svc.id.goog) waits for the stack's GKE "
        "clusters.",
        "The pool exists only once the project's first Workload Identity cluster does; a "
        "binding created earlier fails the first `pulumi up` on an empty project.",
        _check_pool_after_cluster,
        MANDATORY,
        fix=(
            "Make the resource depend on the GKE cluster (depends_on, or a value read from the "
            "cluster's workloadIdentityConfig) so the pool exists when it is created."
        ),
    ),
]
