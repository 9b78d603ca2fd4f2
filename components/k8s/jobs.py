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
  annotation comes from the platform (Karpenter's do-not-disrupt on EKS).
- The runtime is told its notice sources, its SIGTERM grace and the drain's lag behind the
  cloud's notice, so its final save is planned for the time the node really has left.
- The run is named by the Job: CHECKPOINT_URI is `<team checkpoint root>/<job name>`, so
  resubmitting a Job with the same name resumes that run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from components.k8s.placement import SPOT_PREFERENCE, Placement

# The runtime exits with EX_TEMPFAIL when it stopped for a preemption after a final save.
PREEMPTED_EXIT_CODE = 75
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
CONTAINER = "trainer"
SCRATCH_DIR = "/scratch"
METRICS_PORT = 9400
METRICS_PORT_NAME = "metrics"
RENDEZVOUS_PORT = 29400
# A lost peer fails the survivors' workers once, and torchrun counts that as a restart; a long
# run on spot sees many of them.
ELASTIC_MAX_RESTARTS = 100
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
    shm_size: str = "16Gi"
    backoff_limit: int = 3
    labels: dict[str, str] = field(default_factory=dict)
    # Pod annotations, e.g. the provisioner's "never move a running pod".
    annotations: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.notice_seconds < 1:
            raise ValueError(f"notice_seconds must be positive, got {self.notice_seconds}")
        if not 0 <= self.notice_lag_seconds < self.notice_seconds:
            raise ValueError(
                f"notice_lag_seconds must be in [0, {self.notice_seconds}), "
                f"got {self.notice_lag_seconds}"
            )
        if self.backoff_limit < 0:
            raise ValueError(f"backoff_limit must be >= 0, got {self.backoff_limit}")
        if not self.command:
            raise ValueError("command must not be empty")


def single_node_job(spec: TrainingJobSpec) -> dict:
    """A one-pod training Job."""
    return _job(spec, _pod_spec(spec, list(spec.command)), completions=None)


def multi_node_job(spec: TrainingJobSpec, min_nodes: int, max_nodes: int) -> list[dict]:
    """An elastic multi-node run: a headless Service and an indexed Job running torchrun.

    torchrun's c10d rendezvous is hosted by index 0 (`<job>-0.<job>`); with --nnodes=MIN:MAX
    the survivors re-form the group without a preempted node and take it back when its
    replacement pod joins.
    """
    if not 1 <= min_nodes <= max_nodes:
        raise ValueError(f"need 1 <= min_nodes <= max_nodes, got {min_nodes}..{max_nodes}")
    endpoint = f"$(RUN_NAME)-0.$(RUN_NAME).{spec.namespace}.svc:{RENDEZVOUS_PORT}"
    command = [
        "torchrun",
        f"--nnodes={min_nodes}:{max_nodes}",
        f"--nproc-per-node={max(spec.gpus, 1)}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}",
        "--rdzv-id=$(RUN_NAME)",
        f"--max-restarts={ELASTIC_MAX_RESTARTS}",
        *spec.command,
    ]
    pod = _pod_spec(spec, command)
    pod["subdomain"] = spec.name
    pod["containers"][0]["ports"].append(
        {"name": "rendezvous", "containerPort": RENDEZVOUS_PORT, "protocol": "TCP"}
    )
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": _labels(spec)},
        "spec": {
            "clusterIP": "None",
            # Rendezvous must resolve peers before they report ready.
            "publishNotReadyAddresses": True,
            "selector": {JOB_NAME_LABEL: spec.name},
            "ports": [{"name": "rendezvous", "port": RENDEZVOUS_PORT, "protocol": "TCP"}],
        },
    }
    job = _job(spec, pod, completions=max_nodes)
    job["spec"]["parallelism"] = max_nodes
    job["spec"]["completionMode"] = "Indexed"
    return [service, job]


def _labels(spec: TrainingJobSpec) -> dict[str, str]:
    return {"app.kubernetes.io/part-of": "spot-training", **spec.labels}


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


def _pod_spec(spec: TrainingJobSpec, command: list[str]) -> dict:
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
                    {
                        "name": "RUN_NAME",
                        "valueFrom": {
                            "fieldRef": {"fieldPath": f"metadata.labels['{JOB_NAME_LABEL}']"}
                        },
                    },
                    {"name": "CHECKPOINT_URI", "value": f"{spec.checkpoint_root}/$(RUN_NAME)"},
                    # The runtime's notice sources, and the SIGTERM deadline it plans its save by:
                    # the grace, less the drain's lag behind the cloud's notice.
                    {"name": "SPOTSAFE_NOTICE_SOURCES", "value": ",".join(spec.notice_sources)},
                    {"name": "SPOTSAFE_SIGTERM_GRACE_S", "value": str(spec.notice_seconds)},
                    {"name": "SPOTSAFE_SIGTERM_LAG_S", "value": str(spec.notice_lag_seconds)},
                ],
                "ports": [
                    {"name": METRICS_PORT_NAME, "containerPort": METRICS_PORT, "protocol": "TCP"}
                ],
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
            # Data-loader workers share tensors through /dev/shm.
            {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": spec.shm_size}},
        ],
    }
