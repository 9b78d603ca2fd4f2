"""The emulated cloud: node slots in a spot and an on-demand pool, each with its own metadata
server, so a preemption notice reaches the trainer the way it does on the cloud."""

from __future__ import annotations

from dataclasses import dataclass, field

from spotsafe.local.metadata import AwsImds, GceMetadata

SPOT = "spot"
ON_DEMAND = "on-demand"
# How each spot node announces a preemption, in turn: AWS IMDS, GCE metadata, or a node drain
# (Karpenter's interruption handling / GKE graceful shutdown), which reaches the pod as SIGTERM.
FLAVOURS = ("aws", "gce", "sigterm")
# The notice paths of the drill's spot pool, by `--cloud`: every path in turn, or a GKE Spot pool
# seen through the GCE metadata server alone.
CLOUD_FLAVOURS = {"any": FLAVOURS, "gcp": ("gce",)}


@dataclass(eq=False)
class Node:
    name: str
    pool: str
    flavour: str
    aws: AwsImds | None = None
    gce: GceMetadata | None = None
    up_since: float | None = None
    """When the node was provisioned; None while the slot is empty."""
    empty_since: float | None = None
    """When its last job left; None while a job runs on it."""
    available_at: float = 0.0
    """When the slot may be provisioned again (capacity returns after a reclaim)."""
    reclaim_at: float | None = None
    """The deadline of a preemption notice served to this node."""
    uptime: list[tuple[float, float]] = field(default_factory=list)

    @property
    def up(self) -> bool:
        return self.up_since is not None

    def schedulable(self, now: float) -> bool:
        if self.up:
            return self.empty_since is not None and self.reclaim_at is None
        return now >= self.available_at

    def provision(self, now: float) -> None:
        if not self.up:
            self.up_since = now
            for server in (self.aws, self.gce):
                if server is not None:
                    server.reset()
        self.empty_since = None

    def release(self, now: float, capacity_back_at: float | None = None) -> None:
        """The node goes away (scale-down or reclaim)."""
        if self.up:
            self.uptime.append((self.up_since, now))
        self.up_since = self.empty_since = self.reclaim_at = None
        self.available_at = capacity_back_at if capacity_back_at is not None else now

    def up_seconds(self, now: float) -> float:
        open_interval = now - self.up_since if self.up else 0.0
        return sum(end - start for start, end in self.uptime) + open_interval

    def trainer_env(self, notice_s: float, imds_poll_s: float) -> dict[str, str]:
        """The environment a pod on this node sees: which notice sources, and where."""
        env = {"SPOTSAFE_SIGTERM_GRACE_S": str(notice_s)}
        if self.aws is not None:
            env |= {
                "SPOTSAFE_NOTICE_SOURCES": "sigterm,aws",
                "AWS_EC2_METADATA_SERVICE_ENDPOINT": self.aws.url,
                "SPOTSAFE_IMDS_POLL_S": str(imds_poll_s),
            }
        elif self.gce is not None:
            env |= {
                "SPOTSAFE_NOTICE_SOURCES": "sigterm,gce",
                "GCE_METADATA_HOST": self.gce.url.removeprefix("http://"),
                "SPOTSAFE_GCE_NOTICE_S": str(notice_s),
            }
        else:
            env["SPOTSAFE_NOTICE_SOURCES"] = "sigterm"
        return env

    def announce_preemption(self, now: float, notice_s: float, send_sigterm) -> None:
        """Serve the notice through this node's own path; the node is reclaimed at the deadline."""
        self.reclaim_at = now + notice_s
        if self.aws is not None:
            self.aws.announce_interruption(self.reclaim_at)
        elif self.gce is not None:
            self.gce.preempt()
        else:
            send_sigterm()


@dataclass
class Cluster:
    nodes: list[Node]

    @classmethod
    def start(
        cls, spot_nodes: int, on_demand_nodes: int, flavours: tuple[str, ...] = FLAVOURS
    ) -> Cluster:
        nodes = []
        for i in range(spot_nodes):
            flavour = flavours[i % len(flavours)]
            nodes.append(
                Node(
                    f"spot-{i + 1}",
                    SPOT,
                    flavour,
                    aws=AwsImds().start() if flavour == "aws" else None,
                    gce=GceMetadata().start() if flavour == "gce" else None,
                )
            )
        nodes += [Node(f"od-{i + 1}", ON_DEMAND, "sigterm") for i in range(on_demand_nodes)]
        return cls(nodes)

    def close(self) -> None:
        for node in self.nodes:
            for server in (node.aws, node.gce):
                if server is not None:
                    server.close()

    def free_node(self, pool: str, now: float, can_provision: bool = True) -> Node | None:
        """An empty running node of the pool first (no boot wait), else a free slot if the cloud
        can provision one now."""
        candidates = [
            n
            for n in self.nodes
            if n.pool == pool and n.schedulable(now) and (n.up or can_provision)
        ]
        candidates.sort(key=lambda n: not n.up)
        return candidates[0] if candidates else None

    def scale_down(self, now: float, after_s: float) -> None:
        for node in self.nodes:
            if node.up and node.empty_since is not None and now - node.empty_since >= after_s:
                node.release(now)

    def finish(self, now: float) -> None:
        for node in self.nodes:
            node.release(now)
