"""Kubernetes objects as Pulumi resources: a custom resource from its manifest, a pinned chart
(components/versions.py) as a Helm release."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from components.versions import Chart


def helm_release(
    name: str,
    chart: Chart,
    values: dict,
    opts: pulumi.ResourceOptions,
    *,
    create_namespace: bool = False,
    skip_crds: bool = False,
    timeout_seconds: int = 300,
) -> k8s.helm.v3.Release:
    """The chart installed atomically in its namespace: a failed install or upgrade rolls back
    (after `timeout_seconds`, Helm's default unless a chart needs longer)."""
    return k8s.helm.v3.Release(
        name,
        name=chart.name,
        chart=chart.chart,
        version=chart.version,
        repository_opts={"repo": chart.repository} if chart.repository else None,
        namespace=chart.namespace,
        create_namespace=create_namespace,
        skip_crds=skip_crds,
        atomic=True,
        timeout=timeout_seconds,
        values=values,
        opts=opts,
    )


def custom_resource(
    name: str, manifest: dict, opts: pulumi.ResourceOptions
) -> k8s.apiextensions.CustomResource:
    return k8s.apiextensions.CustomResource(
        name,
        api_version=manifest["apiVersion"],
        kind=manifest["kind"],
        metadata=manifest["metadata"],
        spec=manifest["spec"],
        opts=opts,
    )
