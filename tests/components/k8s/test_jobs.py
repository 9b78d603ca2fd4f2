"""Training Job templates: preemption never counts as a failure, everything else does."""

from __future__ import annotations

import json
import re

import kubernetes_validate
import pytest

from components.k8s.jobs import (
    EFA_RESOURCE,
    METRICS_PORT_NAMES,
    PREEMPTED_EXIT_CODE,
    QUEUE_LABEL,
    TrainingJobSpec,
    multi_node_job,
    single_node_job,
    spec_document,
    spec_from_document,
)
from components.k8s.placement import class_placement
from components.k8s.rendezvous import rendezvous_endpoint
from components.versions import KUBERNETES_VERSION


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
        rendezvous_endpoint=rendezvous_endpoint("team-a"),
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


def test_multi_node_is_an_elastic_indexed_job_that_meets_in_the_team_store() -> None:
    job = multi_node_job(spec(), min_nodes=2, max_nodes=4)
    kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)
    js = job["spec"]
    assert (js["completionMode"], js["completions"], js["parallelism"]) == ("Indexed", 4, 4)
    # The ranks finish together: one finished node is a finished run.
    assert js["successPolicy"] == {"rules": [{"succeededCount": 1}]}
    assert js["podFailurePolicy"] == single_node_job(spec())["spec"]["podFailurePolicy"]
    assert "subdomain" not in pod(job)
    container = pod(job)["containers"][0]
    command = container["command"]
    assert command[0] == "spotsafe-run"
    assert "--rdzv-endpoint=training-rendezvous.team-a.svc:29400" in command
    # The user's program follows the launcher's own arguments.
    assert command[-3:] == ["python", "-m", "spotsafe.examples.train"]
    env = {e["name"]: e for e in container["env"]}
    assert env["JOB_UID"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.labels['batch.kubernetes.io/controller-uid']"
    )
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"


def test_multi_node_command_is_what_torchrun_parses(monkeypatch: pytest.MonkeyPatch) -> None:
    """torchrun's own parser reads the launcher's arguments as meant."""
    from torch.distributed.run import config_from_args, parse_args

    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # torchrun would set it for the whole process
    [container] = pod(multi_node_job(spec(), min_nodes=2, max_nodes=4))["containers"]
    for var in container["env"]:  # the pod's environment, as torchrun reads it
        if "value" in var:
            monkeypatch.setenv(var["name"], var["value"])
    config, program, program_args = config_from_args(parse_args(container["command"][1:]))
    assert (config.min_nodes, config.max_nodes, config.nproc_per_node) == (2, 4, 8)
    assert config.rdzv_backend == "c10d"
    assert config.run_id == "$(JOB_UID)"  # Kubernetes expands it from the env
    assert config.local_addr == "$(POD_IP)"
    # A client of the team's store, never its host; it waits minutes for its gang, not hours.
    assert config.rdzv_configs["is_host"] == "false"
    assert config.rdzv_configs["join_timeout"] == "600"
    assert config.max_restarts == 100
    assert config.shutdown_timeout == 120  # the ranks' final save may use the whole notice
    assert [program, *program_args] == ["python", "-m", "spotsafe.examples.train"]


def test_multi_node_gang_shares_a_zone_and_never_a_node() -> None:
    affinity = pod(multi_node_job(spec(), min_nodes=2, max_nodes=4))["affinity"]
    [zone] = affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    [node] = affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert (zone["topologyKey"], node["topologyKey"]) == (
        "topology.kubernetes.io/zone",
        "kubernetes.io/hostname",
    )
    for term in (zone, node):
        # This Job's pods only: the API server adds the pod's own Job uid to the selector.
        assert term["matchLabelKeys"] == ["batch.kubernetes.io/controller-uid"]
    # Still only preferring spot: Kueue's flavor decides spot or on-demand.
    assert "preferredDuringSchedulingIgnoredDuringExecution" in affinity["nodeAffinity"]


def test_every_local_rank_serves_metrics_on_a_declared_port() -> None:
    ports = pod(multi_node_job(spec(gpus=8), 2, 4))["containers"][0]["ports"]
    assert [(p["name"], p["containerPort"]) for p in ports] == [
        ("metrics", 9400),
        *((f"metrics-{r}", 9400 + r) for r in range(1, 8)),
    ]
    assert all(re.fullmatch(METRICS_PORT_NAMES, p["name"]) for p in ports)
    single = pod(single_node_job(spec(gpus=8)))["containers"][0]["ports"]
    assert [p["name"] for p in single] == ["metrics"]  # one process


def test_efa_interfaces_are_requested_where_the_class_has_them() -> None:
    container = pod(multi_node_job(spec(efa_interfaces=32), 2, 4))["containers"][0]
    for amounts in container["resources"].values():
        assert amounts[EFA_RESOURCE] == "32"
    assert {"name": "FI_PROVIDER", "value": "efa"} in container["env"]
    plain = pod(multi_node_job(spec(), 2, 4))["containers"][0]
    assert EFA_RESOURCE not in plain["resources"]["limits"]
    assert "FI_PROVIDER" not in {e["name"] for e in plain["env"]}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"notice_seconds": 0}, "notice_seconds must be positive"),
        ({"backoff_limit": -1}, "backoff_limit must be >= 0"),
        ({"command": ()}, "command must not be empty"),
        ({"notice_lag_seconds": 120}, r"notice_lag_seconds must be in \[0, 120\)"),
        ({"gpus": 17}, "gpus must be 0..16, got 17"),
        ({"efa_interfaces": -1}, "efa_interfaces must be >= 0"),
        ({"rendezvous_timeout_s": 0}, "rendezvous_timeout_s must be positive"),
    ],
)
def test_bad_spec_is_rejected_clearly(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        spec(**overrides)


def test_bad_multi_node_run_is_rejected_clearly() -> None:
    with pytest.raises(ValueError, match="min_nodes <= max_nodes, got 3..2"):
        multi_node_job(spec(), min_nodes=3, max_nodes=2)
    with pytest.raises(ValueError, match="needs rendezvous_endpoint"):
        multi_node_job(spec(rendezvous_endpoint=""), min_nodes=1, max_nodes=2)


@pytest.mark.parametrize("seconds", [15, 30, 120])
def test_the_gce_notice_deadline_is_the_pools_grace(seconds) -> None:
    """GKE Spot pools give training pods 15 s (the default), up to 120 s; the runtime's GCE
    deadline must be that, or its earliest-deadline rule plans the save for the wrong window."""
    gce = spec(notice_seconds=seconds, notice_sources=("sigterm", "gce"), notice_lag_seconds=0)
    env = {e["name"]: e.get("value") for e in pod(single_node_job(gce))["containers"][0]["env"]}
    assert env["SPOTSAFE_GCE_NOTICE_S"] == env["SPOTSAFE_SIGTERM_GRACE_S"] == str(seconds)
    multi = {
        e["name"]: e.get("value")
        for e in pod(multi_node_job(gce, min_nodes=2, max_nodes=4))["containers"][0]["env"]
    }
    assert multi["SPOTSAFE_GCE_NOTICE_S"] == str(seconds)
    aws = {e["name"] for e in pod(single_node_job(spec()))["containers"][0]["env"]}
    assert "SPOTSAFE_GCE_NOTICE_S" not in aws


def test_a_spec_comes_back_from_its_document_as_json_carries_it() -> None:
    """The templates component records its spec for `spotctl job`; through the engine's JSON
    (numbers as floats, tuples as lists) it comes back the same."""
    gcp = spec(
        placement=class_placement("l4-24gb", "spot", "cloud.google.com/compute-class"),
        notice_sources=("sigterm", "gce"),
        checkpoint_interval_s=600,
        checkpoint_every_steps=300,
    )
    document = json.loads(json.dumps(spec_document(gcp)), parse_int=float)
    back = spec_from_document(document)
    assert back == gcp
    # Whole numbers are integers again: a GPU count of "8.0" is no Kubernetes quantity.
    assert json.dumps(multi_node_job(back, 2, 2)) == json.dumps(multi_node_job(gcp, 2, 2))


def test_the_planned_intervals_reach_the_container_environment() -> None:
    planned = single_node_job(spec(checkpoint_interval_s=600, checkpoint_every_steps=300))
    env = {e["name"]: e.get("value") for e in pod(planned)["containers"][0]["env"]}
    assert env["CHECKPOINT_INTERVAL_S"] == "600" and env["CHECKPOINT_EVERY_STEPS"] == "300"
    unplanned = pod(single_node_job(spec()))["containers"][0]["env"]
    assert [e["name"] for e in unplanned if e["name"].startswith("CHECKPOINT_")] == [
        "CHECKPOINT_URI"
    ]
    assert not any(e["name"] == "SPOTSAFE_MEMORY_EVERY_STEPS" for e in unplanned)
    tiers = multi_node_job(spec(checkpoint_every_steps=300, memory_every_steps=20), 2, 2)
    env = {e["name"]: e.get("value") for e in pod(tiers)["containers"][0]["env"]}
    assert env["SPOTSAFE_MEMORY_EVERY_STEPS"] == "20"
    for field in ("checkpoint_every_steps", "memory_every_steps"):
        with pytest.raises(ValueError, match=field):
            spec(**{field: -1})
