"""Kubernetes objects as Pulumi resources: a custom resource from its manifest, a pinned chart."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s


@dataclass(frozen=True)
class Chart:
    """A pinned Helm chart: the release's name, the chart, its version and repository."""

    release: str
    chart: str  # a name in `repository`, or an oci:// reference
    version: str
    repository: str | None = None


def helm_release(
    name: str,
    chart: Chart,
    namespace: str,
    values: dict,
    opts: pulumi.ResourceOptions,
    *,
    create_namespace: bool = False,
    skip_crds: bool = False,
) -> k8s.helm.v3.Release:
    """The chart installed atomically: a failed install or upgrade rolls back."""
    return k8s.helm.v3.Release(
        name,
        name=chart.release,
        chart=chart.chart,
        version=chart.version,
        repository_opts={"repo": chart.repository} if chart.repository else None,
        namespace=namespace,
        create_namespace=create_namespace,
        skip_crds=skip_crds,
        atomic=True,
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
