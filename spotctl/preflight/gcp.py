"""What only the GCP project knows before a stack's first `pulumi up`, asked with the operator's
Application Default Credentials through GET calls: the project, the APIs that must be on before
the stack can enable the rest, the cluster's minor in its release channel (GKE's server config),
the classes' accelerators in their zones, the Spot GPU and all-regions quotas and open quota
preferences, the resource-locations org policy, and the Google Groups for RBAC group."""

from __future__ import annotations

from components.catalog import catalog
from components.config import StackConfig
from spotctl.preflight.google_api import ApiError, GoogleApi
from spotctl.preflight.rows import FAIL, PASS, Check, PreflightError, Row

# On before the first `pulumi up`: Service Usage, through which the stack enables every other API
# it calls, and the state backend's Cloud Storage and Cloud KMS (docs/deploy-gcp.md).
APIS_BEFORE_UP = (
    "serviceusage.googleapis.com",
    "storage.googleapis.com",
    "cloudkms.googleapis.com",
)
COMPUTE = "compute.googleapis.com"


def project(api: GoogleApi, project_id: str) -> dict:
    """The stack's project (Resource Manager), or one PreflightError line: a project that does
    not exist or these credentials cannot see stops everything."""
    try:
        return api.get("cloudresourcemanager", f"v3/projects/{project_id}")
    except ApiError as exc:
        if exc.status in (403, 404):
            raise PreflightError(
                f"project {project_id!r} does not exist or these credentials cannot see it "
                f"({exc.status} {exc.reason}): check the stack's gcp:project and "
                "`gcloud config get account`"
            ) from None
        raise


def refused(exc: Exception) -> str | None:
    """Why a call the project refused leaves its check open (None: not a refusal)."""
    if not isinstance(exc, ApiError):
        return None
    if exc.status == 403:
        return f"{exc.call} denied ({exc.reason}): grant it to run this check"
    return f"{exc.call} failed: {exc.status} {exc.reason}: {exc.message}"


def checks(settings: StackConfig, stack: str, api: GoogleApi) -> list[Check]:
    """The checks in the order they run: the project first, since without it nothing else can
    be asked."""
    gcp = settings.gcp
    project_id, region = gcp.project, settings.region
    stack_file = f"stacks/Pulumi.{stack}.yaml"
    machines = catalog("gcp").instance_types

    def the_project() -> list[Row]:
        found = project(api, project_id)
        state = found.get("state", "")
        if state != "ACTIVE":
            return [
                Row(
                    "project",
                    FAIL,
                    f"{project_id} is {state or 'in no known state'}",
                    f"gcloud projects undelete {project_id}, or name an active project in "
                    f"{stack_file}",
                )
            ]
        return [Row("project", PASS, f"{project_id} ({found.get('name', '')}) is ACTIVE")]

    def apis() -> list[Row]:
        try:
            enabled = api.get(
                "serviceusage",
                f"v1/projects/{project_id}/services",
                filter="state:ENABLED",
                pageSize="200",
            )
        except ApiError as exc:
            if exc.reason != "PERMISSION_DENIED" or "SERVICE_DISABLED" not in exc.message:
                raise
            enabled = {"services": []}
        names = {s["config"]["name"] for s in enabled.get("services", [])}
        missing = [a for a in APIS_BEFORE_UP if a not in names]
        if missing:
            return [
                Row(
                    "apis",
                    FAIL,
                    f"{missing} are off; the stack enables the others itself, through them",
                    f"gcloud services enable {' '.join(missing)} --project {project_id}",
                )
            ]
        return [Row("apis", PASS, f"{', '.join(APIS_BEFORE_UP)} enabled")]

    def server_config() -> list[Row]:
        create = gcp.cluster.create
        if create is None:
            return attached_version(gcp.cluster.existing)
        served = api.get("container", f"v1/projects/{project_id}/locations/{region}/serverConfig")
        channel = next(
            (c for c in served.get("channels", []) if c["channel"] == create.release_channel),
            {"validVersions": []},
        )
        valid = channel["validVersions"]
        minor = ".".join(create.version.split(".")[:2])
        if any(v == create.version or v.startswith(f"{create.version}.") for v in valid):
            return [
                Row("gke-version", PASS, f"{create.version} in {create.release_channel} ({region})")
            ]
        offered = sorted({".".join(v.split(".")[:2]) for v in valid})
        return [
            Row(
                "gke-version",
                FAIL,
                f"{create.version} is not offered in the {create.release_channel} channel in "
                f"{region} (minors offered: {offered or 'none'}; {minor} asked)",
                f"set gcp.cluster.create.version to one of {offered} in {stack_file}",
            )
        ]

    def attached_version(existing) -> list[Row]:
        """The attached cluster's nodes run at least the version the stack file says: that
        version decides the Spot shutdown grace the stack asks for."""
        from components.config.gcp import gke_version_key

        found = api.get(
            "container", f"v1/projects/{project_id}/locations/{region}/clusters/{existing.name}"
        )
        running = found.get("currentNodeVersion") or found["currentMasterVersion"]
        if gke_version_key(running) < gke_version_key(existing.version):
            return [
                Row(
                    "gke-version",
                    FAIL,
                    f"{existing.name} runs {running}, older than gcp.cluster.existing.version "
                    f"{existing.version}",
                    f"set gcp.cluster.existing.version to {running} in {stack_file}",
                )
            ]
        return [Row("gke-version", PASS, f"{existing.name} runs {running}")]

    def accelerators() -> list[Row]:
        rows = []
        for index, gpu_class in enumerate(settings.gpu_classes):
            accelerator = machines[gpu_class.instance_types[0]].gke_accelerator
            missing = []
            for zone in gpu_class.pool_zones(settings.zones):
                try:
                    api.get(
                        "compute",
                        f"compute/v1/projects/{project_id}/zones/{zone}/acceleratorTypes/"
                        f"{accelerator}",
                    )
                except ApiError as exc:
                    if exc.status != 404:
                        raise
                    missing.append(zone)
            check = f"accelerators gpu_classes[{index}]"
            if missing:
                rows.append(
                    Row(
                        check,
                        FAIL,
                        f"{accelerator} is not offered in {missing}",
                        f"drop those zones from gpu_classes[{index}].zones in {stack_file} "
                        f"(`gcloud compute accelerator-types list --filter=name={accelerator}`)",
                    )
                )
            else:
                rows.append(
                    Row(check, PASS, f"{accelerator} in {gpu_class.pool_zones(settings.zones)}")
                )
        return rows

    def quotas() -> list[Row]:
        from components.gcp.quotas import all_regions_needs, preemptible_gpu_quota_id

        needs: dict[tuple[str, str | None], int] = {}
        for gpu_class in settings.gpu_classes:
            accelerator = machines[gpu_class.instance_types[0]].gke_accelerator
            key = (preemptible_gpu_quota_id(accelerator), region)
            needs[key] = needs.get(key, 0) + gpu_class.spot_gpus
        for quota_id, need in all_regions_needs(settings).items():
            needs[(quota_id, None)] = need
        preferences = api.get(
            "cloudquotas",
            f"v1/projects/{project_id}/locations/global/quotaPreferences",
            filter="reconciling=true",
        ).get("quotaPreferences", [])
        files_them = bool(gcp.spot_gpu_quota)
        rows = []
        for (quota_id, quota_region), need in sorted(needs.items(), key=str):
            info = api.get(
                "cloudquotas",
                f"v1/projects/{project_id}/locations/global/services/{COMPUTE}/quotaInfos/"
                f"{quota_id}",
            )
            value = _quota_value(info, quota_region)
            where = f" in {quota_region}" if quota_region else ""
            state = f"{value} of {need}{where}"
            pending = [
                p
                for p in preferences
                if p.get("quotaId") == quota_id
                and (p.get("dimensions") or {}).get("region") == quota_region
            ]
            check = f"quota {quota_id}"
            if value >= need:
                rows.append(Row(check, PASS, state))
            elif pending:
                wanted = pending[0]["quotaConfig"]["preferredValue"]
                rows.append(Row(check, PASS, f"{state}; a preference for {wanted} is open"))
            elif files_them:
                rows.append(Row(check, PASS, f"{state}; `pulumi up` files a preference"))
            else:
                dimensions = f" --dimensions=region={quota_region}" if quota_region else ""
                rows.append(
                    Row(
                        check,
                        FAIL,
                        f"{state}, and no preference is open (gcp.spot_gpu_quota is empty)",
                        f"gcloud beta quotas preferences create --service={COMPUTE} "
                        f"--quota-id={quota_id} --preferred-value={need}{dimensions} "
                        f"--project={project_id}",
                    )
                )
        return rows

    def locations() -> list[Row]:
        policy = api.get(
            "orgpolicy",
            f"v2/projects/{project_id}/policies/gcp.resourceLocations:getEffectivePolicy",
        )
        verdict = _location_allowed(policy, region)
        if verdict is None:
            return [Row("org-policy gcp.resourceLocations", PASS, f"{region} allowed")]
        return [
            Row(
                "org-policy gcp.resourceLocations",
                FAIL,
                f"{region} is refused: {verdict}",
                f"ask your organization's admins to allow in:{region}-locations for "
                f"{project_id} (`gcloud org-policies describe gcp.resourceLocations "
                f"--effective --project {project_id}`)",
            )
        ]

    def rbac_group() -> list[Row]:
        create = gcp.cluster.create
        group = create.rbac_security_group if create else None
        if group is None:
            return [Row("rbac-group", PASS, "no Google Groups for RBAC group to look up")]
        try:
            api.get("cloudidentity", "v1/groups:lookup", **{"groupKey.id": group})
        except ApiError as exc:
            if exc.status != 404:
                raise
            return [
                Row(
                    "rbac-group",
                    FAIL,
                    f"{group} does not exist",
                    f"gcloud identity groups create {group} --organization=<your domain>, "
                    "then add the teams' groups as its members",
                )
            ]
        return [Row("rbac-group", PASS, f"{group} exists")]

    return [
        Check("project", ("cloudresourcemanager.projects.get",), the_project),
        Check("apis", ("serviceusage.services.list",), apis),
        Check(
            "gke-version",
            (
                "container.projects.locations.getServerConfig",
                "container.projects.locations.clusters.get",
            ),
            server_config,
        ),
        Check("accelerators", ("compute.acceleratorTypes.get",), accelerators),
        Check(
            "quotas",
            ("cloudquotas.quotaInfos.get", "cloudquotas.quotaPreferences.list"),
            quotas,
        ),
        Check(
            "org-policy",
            ("orgpolicy.policies.getEffectivePolicy",),
            locations,
        ),
        Check("rbac-group", ("cloudidentity.groups.lookup",), rbac_group),
    ]


def _quota_value(info: dict, region: str | None) -> int:
    """The quota's value in `region` (None: the project-wide one): the dimensions entry that
    names the region, else the default entry (no dimensions)."""
    default = 0
    for entry in info.get("dimensionsInfos", []):
        dimensions = entry.get("dimensions") or {}
        value = int(entry.get("details", {}).get("value", 0))
        if region is not None and dimensions.get("region") == region:
            return value
        if not dimensions:
            default = value
    return default


def _location_allowed(policy: dict, region: str) -> str | None:
    """Why the effective gcp.resourceLocations policy refuses the region, or None. Values name a
    region itself, its value group `in:<region>-locations`, or a geography's group such as
    `in:us-locations`, which holds the regions named after it."""

    def names(value: str) -> bool:
        group = value.removeprefix("in:").removesuffix("-locations")
        return value == region or group == region or region.startswith(f"{group}-")

    rules = policy.get("spec", {}).get("rules", [])
    for rule in rules:
        if rule.get("denyAll"):
            return "the policy denies all locations"
        denied = [v for v in rule.get("values", {}).get("deniedValues", []) if names(v)]
        if denied:
            return f"denied by {denied}"
    allowed = [v for rule in rules for v in rule.get("values", {}).get("allowedValues", [])]
    if any(rule.get("allowAll") for rule in rules) or not allowed or any(map(names, allowed)):
        return None
    return f"the policy allows only {allowed}"
