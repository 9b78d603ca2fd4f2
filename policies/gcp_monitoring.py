"""Cloud Monitoring on GCP: an alert policy's metric-threshold conditions compare the way the
Monitoring API accepts (`MetricThreshold.comparison`: COMPARISON_GT or COMPARISON_LT only for
metric thresholds), so the first `pulumi up` does not fail on them."""

from __future__ import annotations

from policies.rule import MANDATORY, ResourceRule

ALERT_POLICY = "gcp:monitoring/alertPolicy:AlertPolicy"
ACCEPTED = ("COMPARISON_GT", "COMPARISON_LT")


def _check_threshold_comparison(args, report_violation, _settings) -> None:
    if args.resource_type != ALERT_POLICY:
        return
    for index, condition in enumerate(args.props.get("conditions") or []):
        threshold = condition.get("conditionThreshold")
        if threshold is None:
            continue
        comparison = threshold.get("comparison")
        if comparison not in ACCEPTED:
            report_violation(
                f"'{args.name}' conditions[{index}].conditionThreshold.comparison is "
                f"{comparison or 'not set'}; the Monitoring API accepts only "
                f"{' or '.join(ACCEPTED)} for a metric threshold"
            )


POLICIES = [
    ResourceRule(
        "monitoring-threshold-comparison",
        "Metric-threshold conditions of alert policies compare with COMPARISON_GT or "
        "COMPARISON_LT.",
        "The Monitoring API refuses any other comparison for a metric threshold: the policy, and "
        "the whole first `pulumi up`, would fail at create.",
        _check_threshold_comparison,
        MANDATORY,
        fix=(
            "Set the condition's conditionThreshold.comparison to COMPARISON_GT or COMPARISON_LT; "
            "the Monitoring API refuses the others for metric thresholds."
        ),
    ),
]
