"""Identity on GCP: no long-lived keys. Nodes and pods get short-lived tokens (node service
accounts, Workload Identity Federation for GKE); a key file is a credential that never expires."""

from __future__ import annotations

from policies.rule import MANDATORY, ResourceRule

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


POLICIES = [
    ResourceRule(
        "gcp-no-service-account-keys",
        "No service account keys or HMAC keys are created.",
        "A key is a long-lived credential that leaks with any file it is copied into; pods and "
        "nodes get short-lived tokens instead.",
        _check_no_keys,
        MANDATORY,
    ),
]
