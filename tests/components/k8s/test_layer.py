"""The Kubernetes layer in the prod stack's resource tree, and its config section."""

from __future__ import annotations

import pytest
import yaml
from stack_files import stack_values

from components.config import UNBUILT_IMAGE, ConfigError, KubernetesConfig, load_config
from components.k8s.layer import training_image
from components.k8s.placement import STABLE
from components.k8s.rendezvous import RendezvousStoreArgs
from spotctl.preview.resources import PreviewResource, preview_program

PROD = load_config(stack_values("prod"))

LAYER = "spot:k8s:KubernetesLayer"


def test_every_kubernetes_resource_lives_under_the_layer_on_the_cluster_provider(
    prod_preview: list[PreviewResource],
) -> None:
    resources = prod_preview
    by_urn = {r.urn: r for r in resources}
    (layer,) = [r for r in resources if r.type == LAYER]
    (provider,) = [r for r in resources if r.type == "pulumi:providers:kubernetes"]
    kube = [r for r in resources if r.custom and r.type.startswith("kubernetes:")]
    assert len(kube) > 20
    for resource in kube:
        ancestor = by_urn[resource.parent]
        while ancestor.type != LAYER:
            assert ancestor.type.startswith("spot:"), f"{resource.name} escapes the layer"
            ancestor = by_urn[ancestor.parent]
        assert resource.provider and resource.provider.startswith(provider.urn + "::")
        # Stable names: the environment, the component, then a fixed suffix.
        assert resource.name.startswith(f"{layer.name}-")
    # The provider talks to the stack's own cluster.
    assert provider.inputs.get("kubeconfig")


def test_components_follow_the_type_token_convention(
    prod_preview: list[PreviewResource],
) -> None:
    resources = prod_preview
    types = {r.type for r in resources if r.type.startswith("spot:")}
    for token in (
        "spot:namespaces:TeamNamespace",
        "spot:priorities:Priorities",
        "spot:kueue:KueueQueues",
        "spot:templates:JobTemplates",
        "spot:karpenter:Karpenter",
        "spot:gpus:GpuAgents",
        "spot:alerts:AlertRules",
        "spot:dashboards:Dashboard",
    ):
        assert token in types


def test_notice_budget_and_lag_default_per_cloud() -> None:
    assert KubernetesConfig().notice_for("aws") == 120
    assert KubernetesConfig().notice_for("gcp") == 15
    assert KubernetesConfig(notice_seconds=90).notice_for("aws") == 90
    assert KubernetesConfig().notice_lag_for("aws") == 20
    assert KubernetesConfig().notice_lag_for("gcp") == 0
    assert KubernetesConfig(notice_lag_seconds=5).notice_lag_for("aws") == 5


def base_config() -> dict:
    return {
        "environment": "dev",
        "cloud": "aws",
        "region": "us-east-1",
        "zones": ["us-east-1a"],
        "gpu_classes": [
            {
                "name": "a10g-24gb",
                "instance_types": ["g5.xlarge", "g5.2xlarge"],
                "cpu_per_gpu": 3,
                "memory_gib_per_gpu": 12,
                "spot_gpus": 4,
                "on_demand_gpus": 1,
            }
        ],
        "teams": [
            {
                "name": "a",
                "namespace": "team-a",
                # The default multi-node template runs 4 single-GPU nodes at once.
                "quotas": {"a10g-24gb": {"spot_gpus": 4}},
                "checkpoint_prefix": "teams/a",
            }
        ],
        "alerts": {
            "emails": ["oncall@ml.test"],
            "runbook_base_url": "https://git.ml.test/platform/blob/main",
        },
        "aws": {
            "cluster": {"create": {"name": "c", "public_endpoint_cidrs": []}},
            "pools": {
                "stable": {
                    "instance_types": ["m6i.large"],
                    "min_size": 1,
                    "max_size": 1,
                    "desired_size": 1,
                },
            },
            "spot_gpu_quota": {"g_family_vcpus": 32},
            "on_demand_gpu_quota": {"g_family_vcpus": 8},
            "principals": {
                "platform_admin": ["arn:aws:iam::123456789012:role/admin"],
                "break_glass": ["arn:aws:iam::123456789012:role/security"],
            },
        },
    }


@pytest.mark.parametrize(
    ("section", "path", "words"),
    [
        (
            {"templates": {"image": "registry.example.com/trainer:1.0"}},
            "kubernetes.templates.image",
            "does not match",
        ),
        ({"templates": {"min_nodes": 4, "max_nodes": 2}}, "kubernetes.templates", "exceeds"),
        (
            {"templates": {"priority_class": "services-critical"}},
            "kubernetes.templates.priority_class",
            "training-preemptible",
        ),
        (
            {"kueue": {"pods_ready_timeout": "ten minutes"}},
            "kubernetes.kueue.pods_ready_timeout",
            "does not match",
        ),
        (
            {"monitoring": {"spot_gpu_hour_usd": 5, "on_demand_gpu_hour_usd": 4}},
            "kubernetes.monitoring",
            "must not exceed",
        ),
        ({"kueue": {"borow_spot_gpus": 4}}, "kubernetes.kueue.borow_spot_gpus", "unknown field"),
    ],
)
def test_kubernetes_config_errors_name_the_field(section: dict, path: str, words: str) -> None:
    raw = {**base_config(), "kubernetes": section}
    with pytest.raises(ConfigError) as info:
        load_config(raw)
    paths = [p for p, _ in info.value.problems]
    assert path in paths, info.value.problems
    assert words in str(info.value)


def test_kubernetes_section_is_optional() -> None:
    config = load_config(base_config())
    assert config.kubernetes.templates.image == UNBUILT_IMAGE


def _stores(resources: list[PreviewResource]) -> list[dict]:
    return [
        r.inputs["spec"]
        for r in resources
        if r.type == "kubernetes:apps/v1:Deployment" and r.name.endswith("-rendezvous-deployment")
    ]


def test_rendezvous_stores_wait_at_zero_replicas_for_an_unbuilt_image(prod_preview) -> None:
    (repository,) = [r for r in prod_preview if r.type == "aws:ecr/repository:Repository"]
    stores = _stores(prod_preview)
    assert len(stores) == len(PROD.teams)
    for spec in stores:
        # A store that cannot pull its image would hold up `pulumi up` until it times out.
        assert spec["replicas"] == 0
        (container,) = spec["template"]["spec"]["containers"]
        assert container["image"] == f"{repository.outputs['repositoryUrl']}@{UNBUILT_IMAGE}"


def test_rendezvous_stores_run_the_pushed_image(program_copy) -> None:
    digest = "sha256:" + "b" * 64
    values = stack_values("dev")
    values["kubernetes"] = {"templates": {"image": digest}}
    resources = preview_program(program_copy("dev", values), "dev")
    (repository,) = [r for r in resources if r.type == "aws:ecr/repository:Repository"]
    (spec,) = _stores(resources)
    assert spec["replicas"] == 1
    (container,) = spec["template"]["spec"]["containers"]
    assert container["image"] == f"{repository.outputs['repositoryUrl']}@{digest}"


def test_a_rendezvous_store_is_never_two() -> None:
    with pytest.raises(ValueError, match="RendezvousStoreArgs.replicas: 0 or 1, got 2"):
        RendezvousStoreArgs("team-a", "image", STABLE, replicas=2)


def test_templates_pin_the_image_in_the_stacks_repository(prod_preview) -> None:
    (repository,) = [r for r in prod_preview if r.type == "aws:ecr/repository:Repository"]
    configmaps = [
        r.inputs
        for r in prod_preview
        if r.type == "kubernetes:core/v1:ConfigMap"
        and r.inputs["metadata"]["name"] == "training-job-templates"
    ]
    assert configmaps
    image = f"{repository.outputs['repositoryUrl']}@{UNBUILT_IMAGE}"
    for configmap in configmaps:
        for text in configmap["data"].values():
            images = [
                container["image"]
                for doc in yaml.safe_load_all(text)
                if doc["kind"] == "Job"
                for container in doc["spec"]["template"]["spec"]["containers"]
            ]
            assert images == [image]


def test_a_full_image_reference_is_used_as_configured() -> None:
    image = "registry.ml.test/trainer:1.0@sha256:" + "a" * 64
    assert training_image(image, "ignored") == image
