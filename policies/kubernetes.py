"""Kubernetes objects managed by the stack: services are never preempted by training, and a
spot-tolerating training job never counts a preemption as a failure."""

from __future__ import annotations

import re

from policies.inputs import dig, of_type
from policies.rule import ADVISORY, MANDATORY, ResourceRule, StackRule
from policies.spot_workloads import (
    grace_seconds,
    ignores_disruption,
    job_specs,
    pod_spec,
    tolerates_spot,
)

PRIORITY_CLASS = "kubernetes:scheduling.k8s.io/v1:PriorityClass"
JOB_KINDS = {
    "kubernetes:batch/v1:Job": "Job",
    "kubernetes:batch/v1:CronJob": "CronJob",
    "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet": "JobSet",
}


def _class_name(resource) -> str:
    return dig(resource.props, "metadata", "name", default=resource.name)


def _check_services_priority(args, report_violation, settings) -> None:
    classes = of_type(args.resources, PRIORITY_CLASS)
    is_services = re.compile(settings["servicesClassPattern"])
    services = [c for c in classes if is_services.search(_class_name(c))]
    others = [c for c in classes if c not in services]
    for service in services:
        name, value = _class_name(service), dig(service.props, "value", default=0)
        if dig(service.props, "preemptionPolicy") == "Never":
            report_violation(
                f"PriorityClass '{name}' has preemptionPolicy Never: services could not reclaim "
                "nodes from training",
                service.urn,
            )
        outranking = [_class_name(c) for c in others if dig(c.props, "value", default=0) >= value]
        if outranking:
            report_violation(
                f"services PriorityClass '{name}' (value {value:g}) does not outrank "
                f"{', '.join(outranking)}: training could preempt services",
                service.urn,
            )


def _spot_jobs(args):
    kind = JOB_KINDS.get(args.resource_type)
    if kind is None:
        return []
    return [
        job
        for job in job_specs(kind, dig(args.props, "spec", default={}))
        if tolerates_spot(pod_spec(job))
    ]


def _check_ignores_disruption(args, report_violation, _settings) -> None:
    for job in _spot_jobs(args):
        if not ignores_disruption(job):
            report_violation(
                f"'{args.name}' tolerates spot but its podFailurePolicy does not Ignore "
                "DisruptionTarget: every preemption would use up backoffLimit"
            )


def _check_grace_period(args, report_violation, settings) -> None:
    budget = settings["noticeBudgetSeconds"]
    for job in _spot_jobs(args):
        grace = grace_seconds(pod_spec(job))
        if grace < budget:
            report_violation(
                f"'{args.name}' tolerates spot with terminationGracePeriodSeconds {grace:g}, "
                f"below the {budget:g} s notice budget: the final checkpoint may be cut off"
            )


POLICIES = [
    StackRule(
        "k8s-services-priority-not-preemptible",
        "PriorityClasses for services (name matching servicesClassPattern) outrank every other "
        "PriorityClass and may preempt (preemptionPolicy is not Never).",
        "Services must never lose their nodes to training, and must be able to take the buffer "
        "pool back from it.",
        _check_services_priority,
        MANDATORY,
        config={"servicesClassPattern": {"type": "string", "default": "service"}},
    ),
    ResourceRule(
        "k8s-spot-job-ignores-disruption",
        "Jobs, CronJobs and JobSets that tolerate spot nodes have a podFailurePolicy rule that "
        "Ignores the DisruptionTarget pod condition.",
        "A preemption is not a failure: counted against backoffLimit it kills long runs that "
        "would resume from their checkpoint.",
        _check_ignores_disruption,
        MANDATORY,
    ),
    ResourceRule(
        "k8s-spot-job-grace-period",
        "Spot-tolerating jobs set terminationGracePeriodSeconds to at least noticeBudgetSeconds.",
        "The runtime needs the whole termination notice to write and commit its final "
        "checkpoint (AWS gives 120 s).",
        _check_grace_period,
        ADVISORY,
        config={"noticeBudgetSeconds": {"type": "integer", "minimum": 1, "default": 120}},
    ),
]
