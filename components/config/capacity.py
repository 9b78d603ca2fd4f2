"""Checks that refuse a stack whose capacity cannot run its jobs, each naming a field path.

`load_config` runs them once the schema holds. Everything is measured against the catalog
(`components/catalog.yaml`):

- every instance type is in the catalog, every zone is one of the region's; on GCP, every zone
  of a class's pools (and of a GPU buffer) offers its accelerator;
- a GPU class is one accelerator model and memory, named after it, on the GPU AMI's architecture;
  a GPU buffer's accelerator is a class of the stack (the buffer joins it);
- the teams' quotas of a class fit in its pools' limits, and the pools' limits in the requested
  service quotas (vCPUs per instance family, spot and on-demand);
- every Job template's pod fits at least one instance type of its class, after what the node
  keeps for itself;
- Kueue's requeue timeouts agree with how long a multi-node template's agents wait for their
  gang (twice its class's `replacement_time`), so a lost node never becomes a counted failure;
- what the first `pulumi up` launches fits the quotas the account has before any request is
  granted (`creation_problems`, given the quotas read from the account).

A check that spans two fields reports at the one that asks for capacity (a quota, a template)
and names the one that provides it in its message.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from components.catalog import Catalog, InstanceType, catalog, class_name
from components.config.aws import quota_field
from components.config.schema import duration_seconds
from components.config.stack import GpuClass, StackConfig

Problem = tuple[str, str]

# What a node keeps for itself, as Karpenter computes it for the EKS AMIs (and the kubelet then
# enforces): kube-reserved CPU is 6 % of the first core, 1 % of the second, 0.5 % of the next
# two and 0.25 % of the rest; kube-reserved memory is 11 MiB per pod plus 255 MiB; the kubelet
# evicts below 100 MiB free; and the hypervisor takes 7.5 % of the memory sold
# (settings.vmMemoryOverheadPercent).
MAX_PODS = 29  # kubelet maxPods on GPU nodes: the ENI limit of the smallest GPU type
EVICTION_MIB = 100
VM_MEMORY_OVERHEAD = 0.075
# Requests of the DaemonSets on every GPU node (VPC CNI, kube-proxy, the Pod Identity agent, the
# NVIDIA device plugin, the CloudWatch agent and its DCGM exporter, the Prometheus node exporter),
# with headroom.
DAEMONSET_MILLICPU = 500
DAEMONSET_MIB = 1024
# GKE's kube-reserved memory (cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes):
# a share of each band of the machine's memory, (GiB in the band, share); CPU as above. Its
# eviction threshold is the same 100 MiB.
GKE_MEMORY_RESERVED = ((4, 0.25), (4, 0.20), (8, 0.10), (112, 0.06), (float("inf"), 0.02))


@dataclass(frozen=True)
class Allocatable:
    """What a pod can request on an empty node of one instance type."""

    millicpu: int
    memory_mib: int
    gpus: int


def allocatable(instance: InstanceType, cloud: str = "aws") -> Allocatable:
    cores = instance.vcpus
    reserved_millicpu = (
        60
        + 10 * min(max(cores - 1, 0), 1)
        + 5 * min(max(cores - 2, 0), 2)
        + 2.5 * max(cores - 4, 0)
    )
    if cloud == "gcp":
        memory_mib = instance.memory_gib * 1024
        reserved_mib, left = EVICTION_MIB, instance.memory_gib
        for band, share in GKE_MEMORY_RESERVED:
            reserved_mib += min(left, band) * share * 1024
            left = max(left - band, 0)
    else:
        memory_mib = instance.memory_gib * 1024 * (1 - VM_MEMORY_OVERHEAD)
        reserved_mib = 11 * MAX_PODS + 255 + EVICTION_MIB
    return Allocatable(
        millicpu=int(cores * 1000 - reserved_millicpu - DAEMONSET_MILLICPU),
        memory_mib=int(memory_mib - reserved_mib - DAEMONSET_MIB),
        gpus=instance.gpus,
    )


def capacity_problems(config: StackConfig) -> list[Problem]:
    """Every capacity problem of a schema-valid config, as (field path, message)."""
    known = catalog(config.cloud)
    problems = _zone_problems(config, known)
    classes = {}
    for index, gpu_class in enumerate(config.gpu_classes):
        found = _class_problems(config, index, gpu_class, known)
        problems += found
        if not found:
            types = [known.instance_types[name] for name in gpu_class.instance_types]
            classes[gpu_class.name] = (index, gpu_class, types)
            problems += _offering_problems(
                config,
                f"gpu_classes[{index}].zones",
                f"class {gpu_class.name!r}",
                types[0].gke_accelerator,
                gpu_class.zones,
            )
    if config.aws is not None:
        problems += _pool_problems(config, known)
    if config.gcp is not None:
        problems += _gke_pool_problems(config, classes, known)
    if config.gcp is not None and config.gcp.buffer_pool is not None:
        problems += _gke_buffer_problems(config, known)
    problems += _quota_problems(config, classes)
    problems += _class_reference_problems(config)
    problems += _template_problems(config, classes, config.cloud)
    problems += _rendezvous_problems(config)
    if config.aws is not None and not problems:
        problems += _service_quota_problems(config, classes, known)
    kube = config.kubernetes
    if kube.notice_lag_for(config.cloud) >= kube.notice_for(config.cloud):
        problems.append(
            (
                "kubernetes.notice_lag_seconds",
                f"{kube.notice_lag_for(config.cloud)} s leaves no time of the "
                f"{kube.notice_for(config.cloud)} s notice for the final save",
            )
        )
    return problems


def _zone_problems(config: StackConfig, known: Catalog) -> list[Problem]:
    zones = known.zones.get(config.region)
    if zones is None:
        return [
            (
                "region",
                f"{config.region!r} has no zones in the catalog (components/catalog.yaml); "
                f"known regions: {', '.join(sorted(known.zones))}",
            )
        ]
    return [
        (f"zones[{i}]", f"{zone!r} is not a zone of {config.region} ({', '.join(zones)})")
        for i, zone in enumerate(config.zones)
        if zone not in zones
    ]


def _unknown(path: str, name: str, known: Catalog) -> Problem | None:
    if name in known.instance_types:
        return None
    return (path, f"unknown instance type {name!r}: not in the catalog (components/catalog.yaml)")


def _class_problems(
    config: StackConfig, index: int, gpu_class: GpuClass, known: Catalog
) -> list[Problem]:
    where = f"gpu_classes[{index}]"
    problems = []
    first = None
    for i, name in enumerate(gpu_class.instance_types):
        path = f"{where}.instance_types[{i}]"
        unknown = _unknown(path, name, known)
        if unknown:
            problems.append(unknown)
            continue
        instance = known.instance_types[name]
        if instance.accelerator is None:
            problems.append((path, f"{name!r} has no GPU; a GPU class lists GPU types only"))
            continue
        if first is None:
            first = instance
        elif instance.accelerator != first.accelerator:
            problems.append(
                (
                    path,
                    f"{name!r} carries {_gpu(instance)} GPUs but {first.name!r} carries "
                    f"{_gpu(first)}: a class never mixes accelerator models",
                )
            )
            continue
        arch = config.aws.gpu_ami.architecture if config.aws else instance.architecture
        if instance.architecture != arch:
            problems.append(
                (
                    path,
                    f"{name!r} is {instance.architecture}, but GPU nodes run the {arch} AMI and "
                    "image (aws.gpu_ami.architecture)",
                )
            )
    if first is not None and gpu_class.name != class_name(first.accelerator):
        problems.append(
            (
                f"{where}.name",
                f"{gpu_class.name!r} does not name its GPUs: its types carry {_gpu(first)}, "
                f"so call it {class_name(first.accelerator)!r}",
            )
        )
    return problems


def _offering_problems(
    config: StackConfig, where: str, owner: str, accelerator: str | None, zones: list[str] | None
) -> list[Problem]:
    """The zones of GKE pools (`where`, unset: the stack's zones) that do not offer their
    accelerator: a node pool there could never get a node (EKS: Karpenter reads the live
    offerings, so nothing to check)."""
    if accelerator is None:
        return []
    offered = catalog(config.cloud).accelerator_zones.get(accelerator, {}).get(config.region, ())
    why = f"{accelerator} is offered in {config.region} only in {list(offered)}"
    if zones is None:
        missing = [zone for zone in config.zones if zone not in offered]
        if not missing:
            return []
        return [
            (
                where,
                f"not set, so {owner} spans the stack's zones, but {why}: set it to the stack's "
                "zones among those",
            )
        ]
    return [
        (f"{where}[{i}]", f"{zone!r} does not offer the GPUs of {owner}: {why}")
        for i, zone in enumerate(zones)
        if zone not in offered
    ]


def _gpu(instance: InstanceType) -> str:
    return f"{instance.gpu} {instance.gpu_memory_gib} GB"


def _pool_problems(config: StackConfig, known: Catalog) -> list[Problem]:
    """The managed node groups: known types, one architecture, GPU or CPU but not both; GPUs of a
    class of the stack."""
    problems = []
    pools = config.aws.pools
    for tier in ("stable", "buffer"):
        pool = getattr(pools, tier)
        if pool is None:
            continue
        where = f"aws.pools.{tier}.instance_types"
        unknown = [
            p
            for i, name in enumerate(pool.instance_types)
            if (p := _unknown(f"{where}[{i}]", name, known))
        ]
        if unknown:
            problems += unknown
            continue
        types = [known.instance_types[name] for name in pool.instance_types]
        if len({t.architecture for t in types}) > 1 or len({t.gpus > 0 for t in types}) > 1:
            problems.append(
                (
                    where,
                    "one node group needs one AMI: do not mix CPU architectures or GPU and CPU "
                    f"types ({', '.join(f'{t.name} {t.architecture}' for t in types)})",
                )
            )
        elif types[0].gpus and types[0].architecture != config.aws.gpu_ami.architecture:
            problems.append(
                (
                    where,
                    f"GPU types of {types[0].architecture} cannot run the training image built "
                    f"for {config.aws.gpu_ami.architecture} (aws.gpu_ami.architecture)",
                )
            )
        elif types[0].gpus and len({t.accelerator for t in types}) > 1:
            problems.append((where, "one node group of GPUs has one accelerator model and memory"))
        elif types[0].gpus:
            problems += _buffer_class_problems(config, where, types[0])
    return problems


def _buffer_class_problems(config: StackConfig, where: str, machine: InstanceType) -> list[Problem]:
    """A GPU buffer joins the class of its accelerator, which the stack must have."""
    if class_name(machine.accelerator) in {c.name for c in config.gpu_classes}:
        return []
    return [
        (
            where,
            f"its GPUs ({_gpu(machine)}) are of no class in gpu_classes[].name: add "
            f"{class_name(machine.accelerator)!r}, so training runs on the buffer when it is free",
        )
    ]


def _gke_buffer_problems(config: StackConfig, known: Catalog) -> list[Problem]:
    """The buffer's zones are the stack's, its machine type is known, and a GPU buffer's
    accelerator has a class and is offered in each of its zones."""
    buffer, where = config.gcp.buffer_pool, "gcp.buffer_pool"
    problems = [
        (
            f"{where}.zones[{i}]",
            f"{zone!r} is not among the stack's zones (zones[] = {config.zones})",
        )
        for i, zone in enumerate(buffer.zones or ())
        if zone not in config.zones
    ]
    unknown = _unknown(f"{where}.machine_type", buffer.machine_type, known)
    if unknown:
        return [*problems, unknown]
    machine = known.instance_types[buffer.machine_type]
    if machine.accelerator is None or problems:
        return problems
    return [
        *_buffer_class_problems(config, f"{where}.machine_type", machine),
        *_offering_problems(
            config,
            f"{where}.zones",
            f"the buffer pool ({machine.name})",
            machine.gke_accelerator,
            buffer.zones,
        ),
    ]


def _gke_pool_problems(config: StackConfig, classes: dict, known: Catalog) -> list[Problem]:
    """The stable machine type is known and has no GPU; a class's GPU limit holds at least one
    node of one of its machine types (a GKE pool scales by whole nodes)."""
    machine = config.gcp.stable_pool.machine_type
    problems = [
        p for p in [_unknown("gcp.stable_pool.machine_type", machine, known)] if p is not None
    ]
    if not problems and known.instance_types[machine].gpus:
        problems.append(
            ("gcp.stable_pool.machine_type", f"{machine!r} has GPUs; the stable pool runs none")
        )
    for index, gpu_class, types in classes.values():
        smallest = min(t.gpus for t in types)
        for capacity in ("spot_gpus", "on_demand_gpus"):
            limit = getattr(gpu_class, capacity)
            if 0 < limit < smallest:
                problems.append(
                    (
                        f"gpu_classes[{index}].{capacity}",
                        f"{limit} GPUs cannot hold one node of the class: its smallest machine "
                        f"type has {smallest}",
                    )
                )
    return problems


def _class_reference_problems(config: StackConfig) -> list[Problem]:
    """Settings that name a GPU class (besides the teams' quotas) name one of the stack's."""
    names = [c.name for c in config.gpu_classes]
    references = [
        (f"kubernetes.monitoring.class_prices[{name!r}]", name)
        for name in config.kubernetes.monitoring.class_prices
    ]
    if config.aws is not None and config.aws.spot_drill is not None:
        references.append(("aws.spot_drill.gpu_class", config.aws.spot_drill.gpu_class))
    listed = ", ".join(map(repr, names))
    return [
        (where, f"no GPU class {name!r} among gpu_classes[].name ({listed})")
        for where, name in references
        if name not in names
    ]


def _quota_problems(config: StackConfig, classes: dict) -> list[Problem]:
    problems = []
    names = ", ".join(repr(c.name) for c in config.gpu_classes)
    used = {name: {"spot_gpus": 0, "on_demand_gpus": 0} for name in classes}
    for t, team in enumerate(config.teams):
        for class_key, quota in team.quotas.items():
            where = f"teams[{t}].quotas[{class_key!r}]"
            if not any(c.name == class_key for c in config.gpu_classes):
                problems.append(
                    (where, f"no GPU class {class_key!r} among gpu_classes[].name ({names})")
                )
                continue
            if class_key not in classes:
                continue  # the class itself is broken; that is reported at the class
            index, gpu_class, _ = classes[class_key]
            for capacity in ("spot_gpus", "on_demand_gpus"):
                before = used[class_key][capacity]
                used[class_key][capacity] += getattr(quota, capacity)
                limit = getattr(gpu_class, capacity)
                if before <= limit < used[class_key][capacity]:
                    problems.append(
                        (
                            f"{where}.{capacity}",
                            f"the teams' {capacity.removesuffix('_gpus').replace('_', '-')} "
                            f"quotas of {class_key!r} reach {used[class_key][capacity]} GPUs "
                            f"here, more than its pool may run "
                            f"(gpu_classes[{index}].{capacity} = {limit})",
                        )
                    )
    return problems


def template_class(config: StackConfig, team_index: int) -> str:
    """The GPU class of a team's Job templates."""
    return config.kubernetes.templates.gpu_class or next(iter(config.teams[team_index].quotas))


def efa_interfaces(config: StackConfig, gpu_class: GpuClass) -> int:
    """EFA interfaces a multi-node pod of this class may request: what every type offers."""
    types = catalog(config.cloud).instance_types
    return min(types[name].efa for name in gpu_class.instance_types)


def _template_problems(config: StackConfig, classes: dict, cloud: str) -> list[Problem]:
    templates = config.kubernetes.templates
    problems = []
    for t, team in enumerate(config.teams):
        class_key = template_class(config, t)
        if class_key not in team.quotas:
            problems.append(
                (
                    "kubernetes.templates.gpu_class",
                    f"team {team.name!r} has no quota of class {class_key!r} "
                    f"(teams[{t}].quotas), so its template could never be admitted",
                )
            )
            continue
        if class_key not in classes:
            continue
        # A pod that fits no node is the first problem; admission counts pods that can run.
        problem = _fit_problem(
            templates.gpus_per_node, *classes[class_key], cloud
        ) or _admission_problem(config, t, class_key)
        if problem and problem not in problems:
            problems.append(problem)
    return problems


def _rendezvous_problems(config: StackConfig) -> list[Problem]:
    """Kueue's timeouts against the agents' wait W for their gang (twice the template class's
    replacement_time). An agent that started gives up after W: with 75 once its ranks ran (a
    node lost, not replaced), with a counted 1 when its gang never formed. So Kueue must
    requeue a gang still missing pods before a fresh agent gives up: pods_ready_timeout <= W
    after admission; and, after a lost node, recovery_timeout < 2 W, since the survivors'
    replacement pods start a fresh wait at W. And recovery_timeout >= W, or Kueue requeues the
    whole run while the replacement the survivors wait for may still come."""
    kueue = config.kubernetes.kueue
    ready_s = duration_seconds(kueue.pods_ready_timeout)
    recovery_s = duration_seconds(kueue.recovery_timeout)
    by_name = {c.name: (i, c) for i, c in enumerate(config.gpu_classes)}
    problems = []
    for t in range(len(config.teams)):
        if template_class(config, t) not in by_name:
            continue  # reported at the template
        index, gpu_class = by_name[template_class(config, t)]
        wait_s = gpu_class.rendezvous_wait_s()
        waits = (
            f"the multi-node agents of class {gpu_class.name!r} wait {wait_s} s for their gang "
            f"(twice gpu_classes[{index}].replacement_time = {gpu_class.replacement_time})"
        )
        if ready_s > wait_s:
            problem = (
                "kubernetes.kueue.pods_ready_timeout",
                f"{kueue.pods_ready_timeout} is longer than {waits}: an agent whose peers are "
                f"still pending gives up first, a counted failure; set at most {wait_s}s",
            )
        elif recovery_s < wait_s:
            problem = (
                "kubernetes.kueue.recovery_timeout",
                f"{kueue.recovery_timeout} is shorter than {waits}: Kueue would requeue the whole "
                f"run while a lost node's replacement may still come; set at least {wait_s}s",
            )
        elif recovery_s >= 2 * wait_s:
            problem = (
                "kubernetes.kueue.recovery_timeout",
                f"{kueue.recovery_timeout} is not below twice what {waits}: after a lost node the "
                "survivors stop at that wait, and their replacements give up the next, a counted "
                f"failure, before Kueue requeues the run; set below {2 * wait_s}s",
            )
        else:
            continue
        if problem not in problems:
            problems.append(problem)
    return problems


def _admission_problem(config: StackConfig, team_index: int, class_key: str) -> Problem | None:
    """Whether Kueue can ever admit a multi-node template: it admits the Job's `max_nodes` pods
    at once, on one flavor, so they must fit the team's spot quota (with what it may borrow) or
    its on-demand quota of the class."""
    templates = config.kubernetes.templates
    team = config.teams[team_index]
    quota = team.quotas[class_key]
    gpus = templates.max_nodes * templates.gpus_per_node
    spot = quota.spot_gpus + config.kubernetes.kueue.borrow_spot_gpus
    if gpus <= max(spot, quota.on_demand_gpus):
        return None
    return (
        "kubernetes.templates.max_nodes",
        f"a multi-node template of {templates.max_nodes} nodes x {templates.gpus_per_node} GPUs "
        f"needs {gpus} GPUs at once; team {team.name!r} may use {spot} spot (with borrowing) "
        f"or {quota.on_demand_gpus} on-demand GPUs of {class_key!r} "
        f"(teams[{team_index}].quotas), so Kueue could never admit it",
    )


def _fit_problem(
    gpus: int, index: int, gpu_class: GpuClass, types: list[InstanceType], cloud: str
) -> Problem | None:
    """Whether a pod of `gpus` GPUs of the class, with its CPU and memory, fits one of its types."""
    millicpu = gpus * gpu_class.cpu_per_gpu * 1000
    memory_mib = gpus * gpu_class.memory_gib_per_gpu * 1024
    room = [(t, allocatable(t, cloud)) for t in types]
    if any(
        a.gpus >= gpus and a.millicpu >= millicpu and a.memory_mib >= memory_mib for _, a in room
    ):
        return None
    where = f"gpu_classes[{index}]"
    request = (
        f"a template pod of class {gpu_class.name!r} requests {gpus} GPUs, "
        f"{millicpu // 1000} CPU and {memory_mib // 1024} GiB"
    )
    offers = "; ".join(
        f"{t.name} offers {a.gpus} GPU, {a.millicpu / 1000:.2f} CPU, {a.memory_mib / 1024:.1f} GiB"
        for t, a in room
    )
    enough_gpus = [a for _, a in room if a.gpus >= gpus]
    if not enough_gpus:
        path = "kubernetes.templates.gpus_per_node"
    elif not any(a.millicpu >= millicpu for a in enough_gpus):
        path = f"{where}.cpu_per_gpu"
    else:
        path = f"{where}.memory_gib_per_gpu"
    return (
        path,
        f"{request}; no instance type of its class fits it after node reservations "
        f"({where}.instance_types: {offers})",
    )


def _service_quota_problems(config: StackConfig, classes: dict, known: Catalog) -> list[Problem]:
    """The vCPUs each pool may launch, per capacity type and instance family, against the
    requested service quotas. A pool may launch any of its types, so the type with the most
    vCPUs per GPU sets what its GPUs cost in vCPUs."""
    needs: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for index, gpu_class, types in classes.values():
        per_gpu = max(t.vcpus_per_gpu for t in types)
        for capacity, quota_capacity in (("spot_gpus", "spot"), ("on_demand_gpus", "on-demand")):
            gpus = getattr(gpu_class, capacity)
            family = types[0].quota_family(quota_capacity)
            if gpus:
                needs.setdefault((capacity, family), []).append(
                    (
                        math.ceil(gpus * per_gpu),
                        f"gpu_classes[{index}].{capacity} = {gpus} GPUs × {per_gpu:g} vCPUs",
                    )
                )
    buffer = config.aws.pools.buffer
    if buffer is not None:
        types = [known.instance_types[name] for name in buffer.instance_types]
        if types[0].gpus:
            vcpus = buffer.max_size * max(t.vcpus for t in types)
            needs.setdefault(("on_demand_gpus", types[0].quota_family("on-demand")), []).append(
                (vcpus, f"aws.pools.buffer.max_size = {buffer.max_size} nodes × vCPUs")
            )
    problems = []
    for (capacity, family), parts in sorted(needs.items()):
        quota = "spot_gpu_quota" if capacity == "spot_gpus" else "on_demand_gpu_quota"
        family_field = quota_field(family)
        need = sum(vcpus for vcpus, _ in parts)
        requested = getattr(getattr(config.aws, quota), family_field)
        if requested is None or requested < need:
            problems.append(
                (
                    f"aws.{quota}.{family_field}",
                    f"the pools may launch {need} {family.capitalize()} vCPUs "
                    f"({' + '.join(why for _, why in parts)}) but "
                    + (
                        "no quota is requested"
                        if requested is None
                        else f"only {requested} are requested"
                    )
                    + f"; request at least {need}",
                )
            )
    return problems


def starting_gpu_vcpus(config: StackConfig) -> dict[tuple[str, str], int]:
    """GPU vCPUs that exist as soon as `pulumi up` creates the pools, by (capacity, family)
    quota: a GPU buffer's desired size (Karpenter's GPU nodes start at zero, launched for runs)."""
    buffer = config.aws.pools.buffer if config.aws is not None else None
    if buffer is None:
        return {}
    types = [catalog("aws").instance_types[name] for name in buffer.instance_types]
    if not types[0].gpus or not buffer.desired_size:
        return {}
    vcpus = buffer.desired_size * max(t.vcpus for t in types)
    return {("on-demand", types[0].quota_family("on-demand")): vcpus}


def creation_problems(config: StackConfig, current: dict[tuple[str, str], int]) -> list[Problem]:
    """What the first `pulumi up` launches against the account's quotas now (`current`, read
    from the account): the requests that run files are not granted yet, so a node group that
    starts above them fails to create."""
    problems = []
    for (capacity, family), vcpus in starting_gpu_vcpus(config).items():
        allowed = current[(capacity, family)]
        if vcpus > allowed:
            size = config.aws.pools.buffer.desired_size
            problems.append(
                (
                    "aws.pools.buffer.desired_size",
                    f"{size} GPU nodes at creation need {vcpus} {family.capitalize()} "
                    f"{capacity} vCPUs, but the account's quota allows {allowed}"
                    " now and the request this `pulumi up` files is not granted yet; start the "
                    "buffer at 0 (its schedule grows it once the quota is granted)",
                )
            )
    return problems
