"""Cost tags: the same keys on every taggable resource, so bills split by team, env, capacity."""

from __future__ import annotations

from collections.abc import Mapping

PLATFORM_TEAM = "platform"  # owner of shared resources (cluster, bucket, queue)
NO_CAPACITY = "none"  # capacity-type of resources that are not compute


def cost_tags(
    extra: Mapping[str, str],
    env: str,
    team: str = PLATFORM_TEAM,
    capacity: str = NO_CAPACITY,
) -> dict[str, str]:
    """The config's cost tags plus the three the platform owns (config may not override them)."""
    return {**extra, "team": team, "env": env, "capacity-type": capacity}
