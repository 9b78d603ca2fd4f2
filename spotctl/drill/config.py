"""The drill's settings. Defaults finish both arms in about eight minutes on a 2-core machine."""

from __future__ import annotations

from dataclasses import dataclass, field

CLOUD_SECONDS_PER_DRILL_SECOND = 60.0
"""The drill's time scale: its pods start in about 3 s where a GPU node and its pod take about
3 minutes on the cloud (the planner's default node start, `NodeStart().total_s` in
spotctl/plan/node_start.py)."""
SEED_MANUAL_RECOVERY_S = 40 * 60.0
"""Recovery after a recall by hand, without the platform: about 40 minutes (the seed's case)."""
RECOVERY_S = 1800.0
"""The cloud drill: after the interruptions, how long the runs have to be training again (a new
node, the image, the restore: the planner's restart is a few minutes), with room to spare."""
GKE_PERCENT = 50
"""The cloud drill on GKE: the share of the class's Spot VMs it takes away, as docs suggest."""


@dataclass(frozen=True)
class Prices:
    """USD per node-hour for each pool.

    Defaults: AWS g5.xlarge (one A10G) in us-east-1. On-demand is the Linux list price on the EC2
    On-Demand pricing page (https://aws.amazon.com/ec2/pricing/on-demand/). Spot assumes a 60 %
    discount, inside the "up to 90 %" of the EC2 Spot pricing page
    (https://aws.amazon.com/ec2/spot/pricing/); replace it with the current figure from
    `aws ec2 describe-spot-price-history --instance-types g5.xlarge`.
    """

    spot: float = 0.4024
    on_demand: float = 1.006


@dataclass(frozen=True)
class DrillConfig:
    seed: int = 7
    """Seeds the preemption schedule, the choice of victims and each job's training seed."""
    jobs: int = 3
    """Training jobs to run, each the example trainer."""
    steps: int = 40000
    """Steps per job: about a minute of training on an idle 2-core machine, an hour at the
    drill's time scale. Real runs train for hours; a job much shorter than that would be mostly
    its own first start and last save, whatever the platform does about interruptions."""
    every_steps: int = 1000
    """Checkpoint cadence of each job, in steps."""
    size: str = "small"
    """The example trainer's model size."""
    spot_nodes: int = 4
    """One more than the jobs: a diversified pool can replace a reclaimed node at once."""
    on_demand_nodes: int = 1
    notices_per_min: float = 6.0
    """Rate of preemptions with notice over the spot pool (a seeded Poisson process)."""
    notice_s: float = 8.0
    """Notice window: seconds from the notice until the node is reclaimed."""
    hard_kills: int = 2
    """Preemptions with no notice (SIGKILL), at seeded times."""
    hard_kill_window_s: tuple[float, float] = (4.0, 20.0)
    """Seconds after the start between which the hard kills fall."""
    on_demand_after_s: float = 4.0
    """A job waits this long for spot capacity before it may take an on-demand node (on EKS:
    Karpenter's next round after a failed spot launch)."""
    stockout_s: tuple[float, float] | None = None
    """Seconds after the start between which no spot node can be provisioned (EC2 answers
    insufficient capacity); spot nodes already up keep running."""
    final_phase: float = 0.2
    """The last share of each job's steps runs on on-demand when a node is free there."""
    spot_return_s: float = 3.0
    """Seconds until a reclaimed spot node's capacity comes back."""
    scale_down_s: float = 1.0
    """An empty node is released after this long (the autoscaler's scale-down delay)."""
    cloud: str = "any"
    """Whose notices the spot pool serves: "any" (AWS IMDS, GCE metadata and SIGTERM, node by
    node) or "gcp" (GCE metadata only, as a GKE Spot pool)."""
    imds_poll_s: float = 0.3
    """How often trainers on AWS-flavoured nodes poll IMDS (at most 5 s). The runtime polls
    every 5 s of AWS's 120 s notice; 0.3 s is about that share of the drill's 8 s notice, so
    a notice is not seen later, against the drill's seconds, than on the cloud."""
    timeout_s: float = 900.0
    """The drill gives up on an arm once no job's step has advanced for this long; notices fall
    within this many seconds of the arm's start."""
    prices: Prices = field(default_factory=Prices)
    baseline_jobs: int | None = None
    """Jobs of the baseline arm (spotctl.drill.baseline); None: as many as `jobs`, 0: no
    baseline arm."""
    manual_delay_s: float = SEED_MANUAL_RECOVERY_S / CLOUD_SECONDS_PER_DRILL_SECOND
    """The baseline arm's wait from a pod's death until someone starts it again: the seed's
    40 minutes at the drill's time scale."""
    memory_tier: bool = False
    """Also run the memory tier's part (spotctl.drill.memory_tier): hard kills of a two-node
    job, with the durable tier alone and with the memory tier. Off by default, as the tier is
    in the runtime."""
    node_losses: int = 3
    """The memory tier's part: losses of one node in its schedule, beside one loss of both."""
    memory_every_steps: int = 5
    """The memory tier's part: a memory save every this many steps."""
    two_node_every_steps: int = 50
    """The memory tier's part: the two-node job's durable cadence, in steps."""
    two_node_step_s: float = 0.02
    """The memory tier's part: the two-node job's steps are paced to last this long at least,
    so that a kill lands within a step or two of the step it aims at."""

    @property
    def baseline_job_count(self) -> int:
        return self.jobs if self.baseline_jobs is None else self.baseline_jobs

    def __post_init__(self) -> None:
        problems = []
        if self.jobs < 1:
            problems.append("--jobs must be at least 1")
        if self.spot_nodes < 1 or self.on_demand_nodes < 1:
            problems.append("--spot-nodes and --on-demand-nodes must each be at least 1")
        if self.steps < 1 or self.every_steps < 1:
            problems.append("--steps and --every-steps must be at least 1")
        if self.notices_per_min < 0 or self.hard_kills < 0:
            problems.append("--notices-per-min and --hard-kills must not be negative")
        low, high = self.hard_kill_window_s
        if not 0 <= low <= high:
            problems.append("--hard-kill-window-s needs 0 <= FROM <= TO")
        if self.stockout_s is not None and not 0 <= self.stockout_s[0] < self.stockout_s[1]:
            problems.append("--stockout-s needs 0 <= FROM < TO")
        if self.notice_s <= 0:
            problems.append("--notice-s must be positive")
        if not 0 <= self.final_phase < 1:
            problems.append("--final-phase must be in [0, 1)")
        if self.cloud not in ("any", "gcp"):
            problems.append("--cloud must be any or gcp")
        if not 0 < self.imds_poll_s <= 5:
            problems.append("--imds-poll-s must be in (0, 5]")
        if self.baseline_jobs is not None and self.baseline_jobs < 0:
            problems.append("--baseline-jobs must not be negative")
        if self.manual_delay_s < 0:
            problems.append("--manual-delay-s must not be negative")
        if self.node_losses < 1:
            problems.append("--node-losses must be at least 1")
        if not 1 <= self.memory_every_steps < self.two_node_every_steps:
            problems.append(
                "--memory-every-steps must be at least 1 and below the two-node job's durable "
                f"interval ({self.two_node_every_steps} steps)"
            )
        if self.prices.spot < 0 or self.prices.on_demand <= 0:
            problems.append("prices must be positive")
        if problems:
            raise ValueError("; ".join(problems))


@dataclass(frozen=True)
class CloudRun:
    """`spotctl drill --cloud-run`: what to take away and where to read the ledger."""

    stack: str
    prometheus: str | None
    """URL of the cluster's Prometheus; only a dry run goes without."""
    recovery_s: float = RECOVERY_S
    gpu_class: str | None = None
    """GKE: the class whose Spot VMs go (default: the stack's first); AWS: aws.spot_drill's."""
    percent: int | None = None
    """GKE: the share of them (default GKE_PERCENT); AWS: aws.spot_drill's."""
