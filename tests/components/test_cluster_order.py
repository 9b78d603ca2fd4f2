"""Every resource that names the cluster waits for it, in all four stacks' previews.

An EKS access entry, add-on, node group or pod identity association, or a GKE node pool, created
before its cluster is refused (EKS: ResourceNotFoundException; GKE: 404 on the cluster), and the
providers do not retry that: the cluster takes about ten minutes, what names it seconds. A name
taken from the config instead of the cluster's output carries no dependency, so the preview's
graph (what `pulumi up` orders by) is where it shows.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
from dependency_graph import DependencyGraph
from stack_files import STACKS

from spotctl.preview.resources import PreviewResource

CLUSTERS = ("aws:eks/cluster:Cluster", "gcp:container/cluster:Cluster")
# The input keys the providers name a cluster by, at any depth (Helm values included).
CLUSTER_KEYS = ("clusterName", "cluster")


def named_clusters(value, names: set[str]) -> Iterator[str]:
    """The clusters of `names` that `value` names under a cluster key: by name, or by a path
    ending in /clusters/<name>."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in CLUSTER_KEYS and isinstance(item, str):
                name = item.rsplit("/clusters/", 1)[-1]
                if name in names:
                    yield name
            yield from named_clusters(item, names)
    elif isinstance(value, list):
        for item in value:
            yield from named_clusters(item, names)


def naming_the_cluster(resources: list[PreviewResource]) -> list[tuple[PreviewResource, bool]]:
    """Each custom resource that names a cluster of the stack, and whether it waits for it."""
    graph = DependencyGraph(resources)
    clusters = {r.inputs.get("name"): r for r in resources if r.type in CLUSTERS}
    found = []
    for resource in resources:
        if resource.type in CLUSTERS or not resource.custom:
            continue
        named = set(named_clusters(resource.inputs, set(clusters)))
        if named:
            waits = all(graph.waits_for(resource, clusters[name]) for name in named)
            found.append((resource, waits))
    return found


@pytest.mark.parametrize("stack", STACKS)
def test_every_resource_naming_the_cluster_waits_for_it(stack, stack_preview):
    resources = stack_preview(stack).resources
    found = naming_the_cluster(resources)
    racing = [f"{r.type} {r.name}" for r, waits in found if not waits]
    assert racing == [], f"{stack}: {len(racing)} of {len(found)} race the cluster"
    if any(r.type in CLUSTERS for r in resources):
        # The stack creates its cluster: its access entries, add-ons, node groups or pools name it.
        assert found


def test_the_check_finds_a_resource_that_names_the_cluster_without_waiting(stack_preview):
    """The same check, on prod's preview with the access entries' dependencies taken away: what a
    configured name instead of the cluster's output leaves."""
    resources = stack_preview("prod").resources
    cluster = next(r for r in resources if r.type == CLUSTERS[0])
    entry = next(r for r in resources if r.type == "aws:eks/accessEntry:AccessEntry")
    cut = [
        replace(r, dependencies=[d for d in r.dependencies if d != cluster.urn])
        if r.urn == entry.urn
        else r
        for r in resources
    ]
    racing = [r.urn for r, waits in naming_the_cluster(cut) if not waits]
    assert racing == [entry.urn]
