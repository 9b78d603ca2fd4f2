"""Karpenter on EKS, as the prod stack renders it: per GPU class a spot and an on-demand NodePool,
never moving a running training pod, and GPU templates that fit their class's nodes."""

from __future__ import annotations

from pathlib import Path

import pytest
from stack_files import STACKS, stack_values

from components.aws.karpenter import KarpenterArgs, block_devices
from components.catalog import catalog
from components.config import load_config
from components.config.capacity import allocatable
from components.pools import class_pools
from spotctl.render.manifests import Rendered, render, validate

PROD = load_config(stack_values("prod"))


def of_kind(rendered: Rendered, kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in rendered.all_objects() if o["kind"] == kind}


@pytest.fixture(scope="module")
def node_pools(prod_render) -> dict[str, dict]:
    return of_kind(prod_render[0], "NodePool")


def requirements(pool: dict) -> dict[str, dict]:
    return {r["key"]: r for r in pool["spec"]["template"]["spec"]["requirements"]}


def test_every_class_has_a_spot_and_an_on_demand_pool_spot_first(node_pools) -> None:
    names = {f"{c.name}-{capacity}" for c in PROD.gpu_classes for capacity in ("spot", "on-demand")}
    assert set(node_pools) == names
    for gpu_class in PROD.gpu_classes:
        spot, on_demand = (
            node_pools[f"{gpu_class.name}-spot"],
            node_pools[f"{gpu_class.name}-on-demand"],
        )
        # Karpenter tries the heavier pool first; on-demand is the fallback on a spot stockout.
        assert spot["spec"]["weight"] > on_demand["spec"]["weight"]
        assert requirements(spot)["karpenter.sh/capacity-type"]["values"] == ["spot"]
        assert requirements(on_demand)["karpenter.sh/capacity-type"]["values"] == ["on-demand"]
        assert spot["spec"]["limits"] == {"nvidia.com/gpu": str(gpu_class.spot_gpus)}
        assert on_demand["spec"]["limits"] == {"nvidia.com/gpu": str(gpu_class.on_demand_gpus)}


def test_a_pool_is_one_accelerator_diversified_over_sizes_and_zones(node_pools) -> None:
    types = catalog("aws").instance_types
    for gpu_class in PROD.gpu_classes:
        pool = node_pools[f"{gpu_class.name}-spot"]
        found = requirements(pool)
        listed = found["node.kubernetes.io/instance-type"]
        assert listed["values"] == gpu_class.instance_types
        assert listed["minValues"] == min(3, len(gpu_class.instance_types))
        (model,) = {types[t].gpu for t in gpu_class.instance_types}
        assert found["karpenter.k8s.aws/instance-gpu-name"] == {
            "key": "karpenter.k8s.aws/instance-gpu-name",
            "operator": "In",
            "values": [model],
        }
        memory = found["karpenter.k8s.aws/instance-gpu-memory"]
        (gib,) = {types[t].gpu_memory_gib for t in gpu_class.instance_types}
        # A floor under what EC2 reports (in MiB) for this GPU, above the next smaller model.
        assert memory["operator"] == "Gt" and int(memory["values"][0]) == int(gib * 1024 * 0.9)
        zones = found["topology.kubernetes.io/zone"]
        assert zones["values"] == PROD.zones and zones["minValues"] == 2
        assert found["kubernetes.io/arch"]["values"] == ["amd64"]


def test_labels_and_taint_are_the_cloud_neutral_contract(node_pools) -> None:
    spot = node_pools["l40s-48gb-spot"]["spec"]["template"]
    assert spot["metadata"]["labels"] == {
        "node-pool": "l40s-48gb-spot",
        "capacity-type": "spot",
        "gpu-class": "l40s-48gb",
    }
    gpu = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    assert spot["spec"]["taints"] == [
        {"key": "capacity-type", "value": "spot", "effect": "NoSchedule"},
        gpu,
    ]
    # On-demand GPU nodes repel platform pods too: only GPU work keeps them from being empty.
    on_demand = node_pools["l40s-48gb-on-demand"]["spec"]["template"]
    assert on_demand["metadata"]["labels"]["capacity-type"] == "on-demand"
    assert on_demand["spec"]["taints"] == [gpu]


def test_training_nodes_are_never_moved_under_a_run(node_pools, prod_render) -> None:
    for pool in node_pools.values():
        spec = pool["spec"]
        assert spec["template"]["spec"]["expireAfter"] == "Never"
        disruption = spec["disruption"]
        assert disruption["consolidationPolicy"] == "WhenEmpty"
        assert {"nodes": "0", "reasons": ["Drifted", "Underutilized"]} in disruption["budgets"]
        # A draining node deletes do-not-disrupt pods at once, leaving them their full grace.
        assert spec["template"]["spec"]["terminationGracePeriod"] == "120s"
    rendered, _ = prod_render
    for docs in rendered.templates.values():
        job = next(d for d in docs if d["kind"] == "Job")
        annotations = job["spec"]["template"]["metadata"]["annotations"]
        assert annotations == {"karpenter.sh/do-not-disrupt": "true"}
        assert job["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 120


def test_node_classes_pin_the_ami_keep_imds_from_pods_and_tag_what_they_launch(
    prod_render,
) -> None:
    classes = of_kind(prod_render[0], "EC2NodeClass")
    assert set(classes) == set(of_kind(prod_render[0], "NodePool"))
    for name, node_class in classes.items():
        spec = node_class["spec"]
        assert spec["amiSelectorTerms"] == [{"alias": PROD.aws.gpu_ami.alias}]
        assert not PROD.aws.gpu_ami.alias.endswith("@latest")
        assert spec["metadataOptions"]["httpPutResponseHopLimit"] == 1
        assert spec["metadataOptions"]["httpTokens"] == "required"
        (root,) = spec["blockDeviceMappings"]
        assert root["ebs"]["encrypted"] is True and root["ebs"]["volumeSize"] == "500Gi"
        assert spec["instanceStorePolicy"] == "RAID0"
        capacity = "spot" if name.endswith("-spot") else "on-demand"
        assert spec["tags"] == {
            **PROD.cost_tags,
            "team": "platform",
            "env": "prod",
            "capacity-type": capacity,
        }
        assert all(term["id"].startswith("subnet-") for term in spec["subnetSelectorTerms"])
        assert [t["id"][:3] for t in spec["securityGroupSelectorTerms"]] == ["sg-"]


@pytest.mark.parametrize("stack", STACKS)
def test_every_rendered_job_template_fits_an_instance_type_of_its_class(
    stack, stack_previews
) -> None:
    """The issue's goal, on what the stack really renders: each template pod's requests fit at
    least one instance type of the class it selects, after what the node keeps for itself."""
    config = load_config(stack_values(stack))
    classes = {c.name: c for c in config.gpu_classes}
    types = catalog(config.cloud).instance_types
    rendered = render(stack_previews(stack))
    checked = 0
    for docs in rendered.templates.values():
        for job in (d for d in docs if d["kind"] == "Job"):
            pod = job["spec"]["template"]["spec"]
            gpu_class = classes[pod["nodeSelector"]["gpu-class"]]
            (container,) = pod["containers"]
            requests = container["resources"]["requests"]
            millicpu = int(requests["cpu"]) * 1000
            memory_mib = int(requests["memory"].removesuffix("Gi")) * 1024
            gpus = int(requests["nvidia.com/gpu"])
            rooms = [allocatable(types[name], config.cloud) for name in gpu_class.instance_types]
            assert any(
                r.gpus >= gpus and r.millicpu >= millicpu and r.memory_mib >= memory_mib
                for r in rooms
            ), (stack, job["metadata"]["name"], requests)
            checked += 1
    assert checked == 2 * len(config.teams)  # a single-node and a multi-node template per team


def prod_karpenter_args(**settings) -> KarpenterArgs:
    """Karpenter's args over prod's class pools, with the given settings."""
    return KarpenterArgs(
        cluster_name="c",
        region="us-west-2",
        interruption_queue_name="q",
        node_role_name="r",
        subnet_ids=[],
        security_group_ids=[],
        pools=tuple(class_pools(PROD)),
        notice_seconds=120,
        **settings,
    )


def test_karpenter_args_refuse_an_unpinned_ami() -> None:
    with pytest.raises(ValueError, match="pin a version, not 'al2023@latest'"):
        prod_karpenter_args(ami_alias="al2023@latest")


def bottlerocket_node_class(snapshot: str | None) -> dict:
    """An EC2NodeClass of the prod stack's first class on Bottlerocket, with the component's
    block devices (the selector terms, Outputs in the component, given plainly here)."""
    args = KarpenterArgs(
        cluster_name="c",
        region="us-west-2",
        interruption_queue_name="q",
        node_role_name="r",
        subnet_ids=["subnet-1"],
        security_group_ids=["sg-1"],
        pools=tuple(class_pools(PROD)),
        ami_alias="bottlerocket@v1.40.0",
        notice_seconds=120,
        image_cache_snapshot=snapshot,
    )
    return {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": args.pools[0].name},
        "spec": {
            "role": args.node_role_name,
            "amiSelectorTerms": [{"alias": args.ami_alias}],
            "subnetSelectorTerms": [{"id": "subnet-1"}],
            "securityGroupSelectorTerms": [{"id": "sg-1"}],
            "blockDeviceMappings": block_devices(args, args.pools[0]),
        },
    }


@pytest.mark.parametrize("snapshot", [None, "snap-0123456789abcdef0"])
def test_bottlerocket_nodes_keep_images_on_a_data_volume_the_cache_fills(
    snapshot, shared_schemas
) -> None:
    """Karpenter's Bottlerocket layout (its NodeClasses docs): a 4 GiB OS volume, /dev/xvda, and
    the data volume, /dev/xvdb, that holds containerd's images. The EC2NodeClass CRD of
    karpenter-v1.14.1 (schema and CEL rules) must admit it."""
    node_class = bottlerocket_node_class(snapshot)
    os_volume, data = node_class["spec"]["blockDeviceMappings"]
    assert os_volume == {
        "deviceName": "/dev/xvda",
        "ebs": {
            "volumeType": "gp3",
            "deleteOnTermination": True,
            "volumeSize": "4Gi",
            "encrypted": True,
        },
    }
    assert data["deviceName"] == "/dev/xvdb"
    assert data["ebs"]["volumeSize"] == f"{class_pools(PROD)[0].disk_size_gib}Gi"
    # A volume from a snapshot takes the snapshot's encryption; EC2 refuses a value for it.
    assert data["ebs"].get("snapshotID") == snapshot
    assert ("encrypted" in data["ebs"]) is (snapshot is None)
    problems, _ = validate([node_class], "1.35", [shared_schemas / "karpenter-v1.14.1"])
    assert problems == []


def test_the_image_cache_needs_bottlerocket() -> None:
    with pytest.raises(ValueError, match="needs a bottlerocket AMI alias, not 'al2023@v1'"):
        prod_karpenter_args(ami_alias="al2023@v1", image_cache_snapshot="snap-0123456789abcdef0")


def test_karpenter_objects_wait_for_the_release_that_installs_their_crds(prod_preview) -> None:
    by_urn = {r.urn: r for r in prod_preview}
    (crds,) = [r for r in prod_preview if r.name.endswith("-karpenter-crd")]
    (controller,) = [r for r in prod_preview if r.name.endswith("-karpenter-controller")]
    assert crds.urn in controller.dependencies
    objects = [r for r in prod_preview if r.type.startswith("kubernetes:karpenter.")]
    assert len(objects) == 4 * len(PROD.gpu_classes)
    for obj in objects:
        assert {crds.urn, controller.urn} <= set(obj.dependencies), obj.name
        assert by_urn[obj.parent].type == "spot:karpenter:Karpenter"


def test_render_writes_karpenter_objects_after_their_charts(prod_render) -> None:
    _, out = prod_render
    names = sorted(p.name for p in (Path(out) / "manifests").iterdir())
    node_classes = [n for n in names if "-ec2nodeclass-" in n]
    node_pools = [n for n in names if "-nodepool-" in n]
    assert node_classes and node_pools and max(node_classes) < min(node_pools)
