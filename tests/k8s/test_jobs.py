"""Training Job templates: preemption never counts as a failure, everything else does."""

from __future__ import annotations

import kubernetes_validate
import pytest

from components.k8s.jobs import (
    PREEMPTED_EXIT_CODE,
    QUEUE_LABEL,
    TrainingJobSpec,
    multi_node_job,
    single_node_job,
)
from components.k8s.placement import class_placement
from spotctl.render import KUBERNETES_VERSION


def spec(**overrides) -> TrainingJobSpec:
    values = dict(
        name="run-42",
        namespace="team-a",
        local_queue="training",
        service_account="training",
        priority_class="training-preemptible",
        checkpoint_root="s3://bucket/teams/a",
        image="registry.example.com/trainer@sha256:" + "a" * 64,
        command=("python", "-m", "spotsafe.examples.train"),
        notice_seconds=120,
        notice_sources=("sigterm",),
        notice_lag_seconds=20,
        placement=class_placement("h100-80gb", "spot"),
        gpus=8,
        annotations={"karpenter.sh/do-not-disrupt": "true"},
    )
    values.update(overrides)
    return TrainingJobSpec(**values)


def pod(job: dict) -> dict:
    return job["spec"]["template"]["spec"]


def test_single_node_job_is_preemption_safe() -> None:
    job = single_node_job(spec())
    kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)
    js = job["spec"]
    assert job["metadata"]["labels"][QUEUE_LABEL] == "training"
    assert js["suspend"] is True
    assert js["podReplacementPolicy"] == "Failed"
    assert js["backoffLimit"] == 3
    rules = js["podFailurePolicy"]["rules"]
    assert rules[0] == {
        "action": "Ignore",
        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
    }
    assert rules[1]["action"] == "Ignore"
    assert rules[1]["onExitCodes"]["values"] == [PREEMPTED_EXIT_CODE]
    # Only those two are ignored: no rule fails the job early or ignores anything else.
    assert len(rules) == 2


def test_pod_runs_on_its_class_preferring_spot_with_the_cloud_notice_as_grace() -> None:
    job = single_node_job(
        spec(notice_seconds=15, notice_sources=("sigterm", "gce"), notice_lag_seconds=0)
    )
    p = pod(job)
    assert p["terminationGracePeriodSeconds"] == 15
    assert p["restartPolicy"] == "Never"
    # Its GPU class, never another model; Kueue adds its flavor's labels to this.
    assert p["nodeSelector"] == {"gpu-class": "h100-80gb"}
    toleration = {"key": "capacity-type", "operator": "Equal", "value": "spot"}
    assert {**toleration, "effect": "NoSchedule"} in p["tolerations"]
    preferred = p["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred[0]["preference"]["matchExpressions"] == [
        {"key": "capacity-type", "operator": "In", "values": ["spot"]}
    ]
    # No hard spot requirement: on-demand nodes of the class must be able to take the pod.
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in p["affinity"]["nodeAffinity"]
    env = {e["name"]: e for e in p["containers"][0]["env"]}
    assert env["SPOTSAFE_SIGTERM_GRACE_S"]["value"] == "15"
    assert env["SPOTSAFE_SIGTERM_LAG_S"]["value"] == "0"
    assert env["SPOTSAFE_NOTICE_SOURCES"]["value"] == "sigterm,gce"
    # The platform's annotations reach the pod, not the Job.
    assert job["spec"]["template"]["metadata"]["annotations"] == {
        "karpenter.sh/do-not-disrupt": "true"
    }


def test_the_runtime_plans_its_final_save_for_the_notice_less_the_drain_lag() -> None:
    env = {e["name"]: e for e in pod(single_node_job(spec()))["containers"][0]["env"]}
    assert env["SPOTSAFE_SIGTERM_GRACE_S"]["value"] == "120"
    assert env["SPOTSAFE_SIGTERM_LAG_S"]["value"] == "20"


def test_each_run_checkpoints_under_its_own_name() -> None:
    p = pod(single_node_job(spec()))
    env = {e["name"]: e for e in p["containers"][0]["env"]}
    assert env["RUN_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.labels['batch.kubernetes.io/job-name']"
    )
    assert env["CHECKPOINT_URI"]["value"] == "s3://bucket/teams/a/$(RUN_NAME)"
    # RUN_NAME must be defined before CHECKPOINT_URI for Kubernetes to expand it.
    names = [e["name"] for e in p["containers"][0]["env"]]
    assert names.index("RUN_NAME") < names.index("CHECKPOINT_URI")


def test_pod_is_locked_down_with_an_emptydir_local_tier() -> None:
    p = pod(single_node_job(spec()))
    container = p["containers"][0]
    assert p["serviceAccountName"] == "training"
    assert p["automountServiceAccountToken"] is False
    assert p["securityContext"]["runAsNonRoot"] is True
    assert p["securityContext"]["runAsUser"] >= 10000
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    volumes = {v["name"]: v for v in p["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert "emptyDir" in volumes[mounts["/scratch"]]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"


def test_multi_node_is_an_elastic_indexed_job_behind_a_headless_service() -> None:
    service, job = multi_node_job(spec(), min_nodes=2, max_nodes=4)
    for obj in (service, job):
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {"batch.kubernetes.io/job-name": "run-42"}
    js = job["spec"]
    assert (js["completionMode"], js["completions"], js["parallelism"]) == ("Indexed", 4, 4)
    assert pod(job)["subdomain"] == service["metadata"]["name"]
    command = pod(job)["containers"][0]["command"]
    assert command[0] == "torchrun"
    assert "--nnodes=2:4" in command
    assert "--nproc-per-node=8" in command
    assert "--rdzv-backend=c10d" in command
    assert "--rdzv-endpoint=$(RUN_NAME)-0.$(RUN_NAME).team-a.svc:29400" in command
    # The user's program follows torchrun's own arguments.
    assert command[-3:] == ["python", "-m", "spotsafe.examples.train"]
    assert js["podFailurePolicy"] == single_node_job(spec())["spec"]["podFailurePolicy"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"notice_seconds": 0}, "notice_seconds must be positive"),
        ({"backoff_limit": -1}, "backoff_limit must be >= 0"),
        ({"command": ()}, "command must not be empty"),
        ({"notice_lag_seconds": 120}, r"notice_lag_seconds must be in \[0, 120\)"),
    ],
)
def test_bad_spec_is_rejected_clearly(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        spec(**overrides)


def test_bad_node_range_is_rejected_clearly() -> None:
    with pytest.raises(ValueError, match="min_nodes <= max_nodes, got 3..2"):
        multi_node_job(spec(), min_nodes=3, max_nodes=2)
