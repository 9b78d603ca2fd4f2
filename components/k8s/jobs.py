"""Training Job templates that make a spot preemption cost a restart, never a failure.

Pure functions from a `TrainingJobSpec` to manifests (dicts), so the same objects feed the
per-team template ConfigMaps, `spotctl render` and the tests.

- podFailurePolicy ignores node disruption (`DisruptionTarget`) and the runtime's "preempted,
  resume me" exit code, so neither uses up `backoffLimit`; every other failure counts.
- podReplacementPolicy `Failed`: a replacement starts only once the old pod has stopped, so a
  draining pod and its successor never write checkpoints at the same time.
- The pod selects its GPU class's nodes, tolerates the spot taint and prefers spot nodes; Kueue's
  flavor assignment adds the node labels of the flavor it admitted the job to (the class's spot
  flavor, or its on-demand one as the fallback). The provisioner's "never move a running pod"
  annotation comes from the platform (Karpenter's do-not-disrupt on EKS, the cluster
  autoscaler's safe-to-evict "false" on GKE).
- The runtime is told its notice sources, its SIGTERM grace and the drain's lag behind the
  cloud's notice, so its final save is planned for the time the node really has left.
- The run is named by the Job: CHECKPOINT_URI is `<team checkpoint root>/<job name>`, so
  resubmitting a Job with the same name resumes that run.

A multi-node run is one indexed Job of `spotsafe-run` agents (torchrun that exits 75 after a
preemption stop). Their c10d rendezvous lives in the team's rendezvous store on the stable tier
(components/k8s/rendezvous.py), never in a preemptible pod, so any node may go: every rank
stops at one step with one durable save, the preempted pod exits 75 (or is marked
DisruptionTarget) and is replaced, and the other agents re-form the gang in place with its
replacement. A node lost without notice fails the survivors' ranks, which torchrun restarts in
place (--max-restarts), so that is not counted either; when no replacement joins within
`rendezvous_timeout_s` (twice the class's replacement_time), the survivors exit 75 with one line
naming the node that left, and hold their GPUs idle no longer.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING

from components.k8s.placement import SPOT_PREFERENCE, Placement, class_placement
from components.pools import Taint

if TYPE_CHECKING:
    from components.config.stack import GpuClass

# The runtime exits with EX_TEMPFAIL when it stopped for a preemption after a final save.
PREEMPTED_EXIT_CODE = 75
# Every object and pod of the project carries it.
PART_OF = {"app.kubernetes.io/part-of": "spot-training"}
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
CONTAINER = "trainer"
SCRATCH_DIR = "/scratch"
METRICS_PORT = 9400
METRICS_PORT_NAME = "metrics"
# Local rank r serves its metrics on METRICS_PORT + r, on a port named metrics-r (r > 0).
METRICS_PORT_NAMES = r"metrics(-[0-9]+)?"
# One rank per GPU; the metrics ports of a pod, and the network policy that opens them, cover
# this many.
MAX_LOCAL_RANKS = 16
JOB_UID_LABEL = "batch.kubernetes.io/controller-uid"
ZONE_LABEL = "topology.kubernetes.io/zone"
HOSTNAME_LABEL = "kubernetes.io/hostname"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
# Every stop of the gang (a preemption's exit 75, a lost peer's failure) is a restart for the
# agents that stay; a long run on spot sees many of them.
ELASTIC_MAX_RESTARTS = 100
# The pod's /dev/shm (a tmpfs, counted against its memory limit) for data-loader workers; a run
# with the memory tier adds its copies (`spotctl job`).
SHM_GIB = 16
# Unprivileged ids above the host's user range, so a container escape maps to no host user.
RUN_AS_UID = 10001
RUN_AS_GID = 10001


@dataclass(frozen=True)
class TrainingJobSpec:
    """Everything a team's training run needs; defaults suit a single-GPU spot run."""

    name: str
    namespace: str
    local_queue: str
    service_account: str
    priority_class: str
    checkpoint_root: str
    image: str
    command: tuple[str, ...]
    notice_seconds: int
    # The GPU class's spot-first placement (components.k8s.placement.class_placement).
    placement: Placement
    notice_sources: tuple[str, ...] = ("sigterm",)
    notice_lag_seconds: int = 0
    gpus: int = 1
    cpu: str = "8"
    memory: str = "64Gi"
    gpu_resource: str = "nvidia.com/gpu"
    scratch_size: str = "100Gi"
    shm_size: str = f"{SHM_GIB}Gi"
    backoff_limit: int = 3
    labels: dict[str, str] = field(default_factory=dict)
    # Pod annotations, e.g. the provisioner's "never move a running pod".
    annotations: dict[str, str] = field(default_factory=dict)
    # host:port of the team's rendezvous store (components/k8s/rendezvous.py); multi-node only.
    rendezvous_endpoint: str = ""
    # EFA interfaces per node, as the GPU class has them (0: none). A multi-node pod requests
    # them all, and libfabric (NCCL's aws-ofi-nccl plugin, in the image) uses them.
    efa_interfaces: int = 0
    # How long a multi-node agent waits for its gang in the rendezvous (join_timeout): twice
    # the GPU class's replacement_time (GpuClass.rendezvous_wait_s, 5 minutes by default). The
    # survivors of a node lost and not replaced then exit 75 (requeued, uncounted) instead of
    # holding their GPUs idle.
    rendezvous_timeout_s: int = 600
    # The planned checkpoint interval (`spotctl job`), for the command to save by: in seconds of
    # training as CHECKPOINT_INTERVAL_S and in steps as CHECKPOINT_EVERY_STEPS (0: not planned).
    checkpoint_interval_s: int = 0
    checkpoint_every_steps: int = 0
    # The memory tier's planned interval in steps (several nodes), SPOTSAFE_MEMORY_EVERY_STEPS
    # for the runtime, which keeps its copies under /dev/shm (0: off).
    memory_every_steps: int = 0

    def __post_init__(self) -> None:
        if self.notice_seconds < 1:
            raise ValueError(f"notice_seconds must be positive, got {self.notice_seconds}")
        if not 0 <= self.notice_lag_seconds < self.notice_seconds:
            raise ValueError(
                f"notice_lag_seconds must be in [0, {self.notice_seconds}), "
                f"got {self.notice_lag_seconds}"
            )
        if not 0 <= self.gpus <= MAX_LOCAL_RANKS:
            raise ValueError(f"gpus must be 0..{MAX_LOCAL_RANKS}, got {self.gpus}")
        if self.efa_interfaces < 0:
            raise ValueError(f"efa_interfaces must be >= 0, got {self.efa_interfaces}")
        if self.rendezvous_timeout_s < 1:
            raise ValueError(
                f"rendezvous_timeout_s must be positive, got {self.rendezvous_timeout_s}"
            )
        if self.backoff_limit < 0:
            raise ValueError(f"backoff_limit must be >= 0, got {self.backoff_limit}")
        if not self.command:
            raise ValueError("command must not be empty")
        if (
            min(self.checkpoint_interval_s, self.checkpoint_every_steps, self.memory_every_steps)
            < 0
        ):
            raise ValueError(
                "checkpoint_interval_s, checkpoint_every_steps and memory_every_steps must be >= 0"
            )


def class_fields(gpu_class: GpuClass, gpus: int, efa: int, compute_class_label: str | None) -> dict:
    """The fields of a spec that follow its GPU class (a `GpuClass` of the stack config): the
    class's spot-first placement, `gpus` per pod with the class's CPU and memory per GPU, its
    EFA interfaces (`efa`) and how long a gang waits for a lost node's replacement."""
    return {
        "placement": class_placement(gpu_class.name, "spot", compute_class_label),
        "gpus": gpus,
        "cpu": str(gpus * gpu_class.cpu_per_gpu),
        "memory": f"{gpus * gpu_class.memory_gib_per_gpu}Gi",
        "rendezvous_timeout_s": gpu_class.rendezvous_wait_s(),
        "efa_interfaces": efa,
    }


def spec_document(spec: TrainingJobSpec) -> dict:
    """The spec as plain values (lists for tuples), as a preview records it."""
    return asdict(spec)


def spec_from_document(document: dict) -> TrainingJobSpec:
    """The spec `spec_document` wrote; integral numbers may come back as floats, as JSON's do."""
    placement = document["placement"]
    values = {
        **document,
        "placement": Placement(
            dict(placement["node_labels"]), tuple(Taint(**t) for t in placement["taints"])
        ),
    }
    for f in fields(TrainingJobSpec):
        if f.type == "int":
            values[f.name] = int(values[f.name])
        elif f.type == "tuple[str, ...]":
            values[f.name] = tuple(values[f.name])
    return TrainingJobSpec(**values)


def single_node_job(spec: TrainingJobSpec) -> dict:
    """A one-pod training Job."""
    return _job(spec, _pod_spec(spec, list(spec.command), local_ranks=1), completions=None)


def multi_node_job(spec: TrainingJobSpec, min_nodes: int, max_nodes: int) -> dict:
    """An elastic multi-node run: an indexed Job of one spotsafe-run agent per node.

    The agents meet in the team's rendezvous store under the Job's uid, so a resubmitted Job
    starts a fresh rendezvous; ranks reach each other at their pod IPs. With --nnodes=MIN:MAX
    the gang trains on while at least MIN nodes are up, and takes a replacement back when it
    joins. All pods share one zone and no two share a node.
    """
    if not 1 <= min_nodes <= max_nodes:
        raise ValueError(f"need 1 <= min_nodes <= max_nodes, got {min_nodes}..{max_nodes}")
    if not spec.rendezvous_endpoint:
        raise ValueError("a multi-node run needs rendezvous_endpoint (the team's store)")
    local_ranks = max(spec.gpus, 1)
    command = [
        "spotsafe-run",
        f"--nnodes={min_nodes}:{max_nodes}",
        f"--nproc-per-node={local_ranks}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={spec.rendezvous_endpoint}",
        "--rdzv-id=$(JOB_UID)",
        f"--rdzv-conf=is_host=false,join_timeout={spec.rendezvous_timeout_s}",
        "--local-addr=$(POD_IP)",
        f"--max-restarts={ELASTIC_MAX_RESTARTS}",
        # The command names its own executable (python -m ..., or a binary).
        "--no-python",
        *spec.command,
    ]
    pod = _pod_spec(spec, command, local_ranks)
    container = pod["containers"][0]
    container["env"] += [
        _field_env("JOB_UID", f"metadata.labels['{JOB_UID_LABEL}']"),
        _field_env("POD_IP", "status.podIP"),
        # torchrun waits this long for the ranks' final save after a SIGTERM (default 30 s).
        # An env var, not --shutdown-timeout: an older torchrun ignores it instead of failing.
        {"name": "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "value": str(spec.notice_seconds)},
    ]
    if spec.efa_interfaces:
        for amounts in container["resources"].values():
            amounts[EFA_RESOURCE] = str(spec.efa_interfaces)
        container["env"].append({"name": "FI_PROVIDER", "value": "efa"})
    pod["affinity"]["podAffinity"] = {
        "requiredDuringSchedulingIgnoredDuringExecution": [_same_run(ZONE_LABEL)]
    }
    pod["affinity"]["podAntiAffinity"] = {
        "requiredDuringSchedulingIgnoredDuringExecution": [_same_run(HOSTNAME_LABEL)]
    }
    job = _job(spec, pod, completions=max_nodes)
    job["spec"].update(
        parallelism=max_nodes,
        completionMode="Indexed",
        # The ranks finish together; once one node is done the run is, and a replacement
        # still pending is not started for nothing.
        successPolicy={"rules": [{"succeededCount": 1}]},
    )
    return job


def _same_run(topology_key: str) -> dict:
    """A term that selects the other pods of this Job (the API server adds its uid)."""
    return {
        "labelSelector": {"matchLabels": dict(PART_OF)},
        "matchLabelKeys": [JOB_UID_LABEL],
        "topologyKey": topology_key,
    }


def _field_env(name: str, field_path: str) -> dict:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field_path}}}


def metrics_ports(local_ranks: int) -> list[dict]:
    """One port per local rank, as spotsafe's --metrics-port serves them."""
    return [
        {
            "name": METRICS_PORT_NAME if rank == 0 else f"{METRICS_PORT_NAME}-{rank}",
            "containerPort": METRICS_PORT + rank,
            "protocol": "TCP",
        }
        for rank in range(local_ranks)
    ]


def _labels(spec: TrainingJobSpec) -> dict[str, str]:
    return {**PART_OF, **spec.labels}


def _job(spec: TrainingJobSpec, pod_spec: dict, completions: int | None) -> dict:
    labels = {**_labels(spec), QUEUE_LABEL: spec.local_queue}
    job_spec: dict = {
        # Kueue starts the Job when it admits it to a flavor.
        "suspend": True,
        "backoffLimit": spec.backoff_limit,
        "podReplacementPolicy": "Failed",
        "podFailurePolicy": {
            "rules": [
                {
                    "action": "Ignore",
                    "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                },
                {
                    "action": "Ignore",
                    "onExitCodes": {
                        "containerName": CONTAINER,
                        "operator": "In",
                        "values": [PREEMPTED_EXIT_CODE],
                    },
                },
            ]
        },
        "template": {
            "metadata": {"labels": _labels(spec), "annotations": dict(spec.annotations)},
            "spec": pod_spec,
        },
    }
    if completions is not None:
        job_spec["completions"] = completions
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": labels},
        "spec": job_spec,
    }


def _interval_env(spec: TrainingJobSpec) -> list[dict]:
    planned = {
        "CHECKPOINT_INTERVAL_S": spec.checkpoint_interval_s,
        "CHECKPOINT_EVERY_STEPS": spec.checkpoint_every_steps,
        "SPOTSAFE_MEMORY_EVERY_STEPS": spec.memory_every_steps,
    }
    return [{"name": name, "value": str(value)} for name, value in planned.items() if value]


def _pod_spec(spec: TrainingJobSpec, command: list[str], local_ranks: int) -> dict:
    resources = {"cpu": spec.cpu, "memory": spec.memory}
    if spec.gpus:
        resources[spec.gpu_resource] = str(spec.gpus)
    return {
        # podFailurePolicy requires Never: the Job controller, not the kubelet, decides restarts.
        "restartPolicy": "Never",
        "priorityClassName": spec.priority_class,
        "serviceAccountName": spec.service_account,
        # The workload identity arrives through its own projected token, not the API token.
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": spec.notice_seconds,
        "nodeSelector": dict(spec.placement.node_labels),
        "tolerations": spec.placement.tolerations(),
        "affinity": {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 100, "preference": SPOT_PREFERENCE.node_selector_term()}
                ]
            }
        },
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_UID,
            "runAsGroup": RUN_AS_GID,
            "fsGroup": RUN_AS_GID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": CONTAINER,
                "image": spec.image,
                "imagePullPolicy": "Always",
                "command": command,
                "env": [
                    _field_env("RUN_NAME", f"metadata.labels['{JOB_NAME_LABEL}']"),
                    {"name": "CHECKPOINT_URI", "value": f"{spec.checkpoint_root}/$(RUN_NAME)"},
                    # The runtime's notice sources, and the SIGTERM deadline it plans its save by:
                    # the grace, less the drain's lag behind the cloud's notice.
                    {"name": "SPOTSAFE_NOTICE_SOURCES", "value": ",".join(spec.notice_sources)},
                    {"name": "SPOTSAFE_SIGTERM_GRACE_S", "value": str(spec.notice_seconds)},
                    {"name": "SPOTSAFE_SIGTERM_LAG_S", "value": str(spec.notice_lag_seconds)},
                    *_interval_env(spec),
                    # GCE's preemption notice leaves the pod what the node's shutdown grace gives
                    # it, not the metadata server's fixed 30 s.
                    *(
                        [{"name": "SPOTSAFE_GCE_NOTICE_S", "value": str(spec.notice_seconds)}]
                        if "gce" in spec.notice_sources
                        else []
                    ),
                ],
                "ports": metrics_ports(local_ranks),
                "resources": {"requests": resources, "limits": dict(resources)},
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "runAsNonRoot": True,
                    "capabilities": {"drop": ["ALL"]},
                },
                "volumeMounts": [
                    {"name": "scratch", "mountPath": SCRATCH_DIR},
                    {"name": "tmp", "mountPath": "/tmp"},
                    {"name": "shm", "mountPath": "/dev/shm"},
                ],
            }
        ],
        "volumes": [
            # The runtime's fast local tier (file:///scratch/...): node-local, gone with the pod.
            {"name": "scratch", "emptyDir": {"sizeLimit": spec.scratch_size}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
            # Data-loader workers share tensors through /dev/shm, and the memory tier keeps its
            # copies there (SPOTSAFE_MEMORY_DIR's default).
            {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": spec.shm_size}},
        ],
    }
