"""How the mock engine answers pulumi-gcp: ids, names, self links, emails and numbers in the
formats Google's APIs return after a create, so a GCP program previews with no special case.

Values are derived from the logical name, so a preview is reproducible.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import uuid

DEFAULT_PROJECT = "preview-project"
DEFAULT_REGION = "us-central1"
COMPUTE = "https://www.googleapis.com/compute/v1"
CONTAINER = "https://container.googleapis.com/v1"
# The patch GKE reports for a cluster or pool that names only a minor.
GKE_PATCH_VERSION = "1.35.1-gke.1396000"
CA_CERTIFICATE = base64.b64encode(b"-----BEGIN CERTIFICATE-----\npreview\n").decode()


def _hex(seed: str, length: int) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()[:length]


def _digits(seed: str, length: int) -> str:
    """A decimal number of exactly `length` digits (no leading zero)."""
    return str(10 ** (length - 1) + int(_hex(seed, 24), 16) % (9 * 10 ** (length - 1)))


def project_number(project: str) -> str:
    return _digits(project, 12)


def gcp_outputs(typ: str, logical: str, state: dict, project: str, region: str) -> str:
    """Fill the computed outputs pulumi-gcp returns after a create; return the resource id."""
    project = state.get("project") or project
    autoname = f"{logical}-{_hex(typ + logical, 7)}"
    resource = typ.split(":")[-1]
    module = typ.split(":")[1].split("/")[0]
    if module == "compute":
        name = state.setdefault("name", autoname)
        location = "global" if resource == "Network" else f"regions/{state.get('region', region)}"
        if resource == "RouterNat":
            return f"{project}/{state.get('region', region)}/{state.get('router')}/{name}"
        kind = {
            "Network": "networks",
            "Subnetwork": "subnetworks",
            "Router": "routers",
            "Address": "addresses",
        }.get(resource, resource.lower() + "s")
        resource_id = f"projects/{project}/{location}/{kind}/{name}"
        state.update(selfLink=f"{COMPUTE}/{resource_id}", project=project)
        if resource == "Network":
            state["numericId"] = _digits(logical, 19)
        if resource == "Address" and state.get("addressType", "EXTERNAL") == "EXTERNAL":
            # An external address from Google's ranges, stable per logical name.
            state.setdefault(
                "address",
                f"35.{int(_hex(logical, 2), 16) % 250 + 1}.7.{int(_hex(logical + 'a', 2), 16)}",
            )
        if resource == "Subnetwork":
            network = ipaddress.ip_network(state.get("ipCidrRange", "10.0.0.0/24"))
            state.update(
                region=state.get("region", region),
                gatewayAddress=str(network.network_address + 1),
                subnetworkId=int(_digits(logical, 18)),
                fingerprint=_hex(logical, 12),
            )
        return resource_id
    if typ == "gcp:container/cluster:Cluster":
        return _cluster(state, autoname, project, region)
    if typ == "gcp:container/nodePool:NodePool":
        name = state.setdefault("name", autoname)
        cluster, location = state.get("cluster"), state.get("location", region)
        zones = state.get("nodeLocations") or [f"{location}-a"]
        groups = [
            f"{COMPUTE}/projects/{project}/zones/{zone}/instanceGroupManagers/"
            f"gke-{cluster}-{name}-{_hex(name + zone, 8)}-grp"
            for zone in zones
        ]
        state.update(
            project=project,
            instanceGroupUrls=groups,
            managedInstanceGroupUrls=[
                g.replace("instanceGroupManagers", "instanceGroups") for g in groups
            ],
            version=state.get("version") or GKE_PATCH_VERSION,
        )
        return f"projects/{project}/locations/{location}/clusters/{cluster}/nodePools/{name}"
    if typ == "gcp:artifactregistry/repository:Repository":
        location, repository = state.get("location", region), state.get("repositoryId")
        state.update(
            project=project,
            name=repository,
            registryUri=f"{location}-docker.pkg.dev/{project}/{repository}",
        )
        return f"projects/{project}/locations/{location}/repositories/{repository}"
    if typ == "gcp:kms/keyRing:KeyRing":
        name = state.setdefault("name", autoname)
        return f"projects/{project}/locations/{state.get('location', region)}/keyRings/{name}"
    if typ == "gcp:kms/cryptoKey:CryptoKey":
        key = f"{state.get('keyRing')}/cryptoKeys/{state.setdefault('name', autoname)}"
        state["primaries"] = [{"name": f"{key}/cryptoKeyVersions/1", "state": "ENABLED"}]
        return key
    if typ == "gcp:storage/bucket:Bucket":
        name = state.setdefault("name", autoname.lower()[:63])
        state.update(
            project=project,
            url=f"gs://{name}",
            selfLink=f"https://www.googleapis.com/storage/v1/b/{name}",
            projectNumber=project_number(project),
        )
        return name
    if typ == "gcp:serviceaccount/account:Account":
        email = f"{state.get('accountId')}@{project}.iam.gserviceaccount.com"
        name = f"projects/{project}/serviceAccounts/{email}"
        state.update(
            project=project,
            email=email,
            name=name,
            uniqueId=_digits(email, 21),
            member=f"serviceAccount:{email}",
        )
        return name
    if typ == "gcp:projects/iAMCustomRole:IAMCustomRole":
        name = f"projects/{state.get('project') or project}/roles/{state.get('roleId')}"
        state.update(project=project, name=name, deleted=False)
        return name
    if resource.endswith("IAMMember") or resource.endswith("IAMBinding"):
        target = next(
            (state[k] for k in ("cryptoKeyId", "bucket", "serviceAccountId") if k in state),
            project,
        )
        if module == "storage":
            target = f"b/{target}"
        state["etag"] = base64.b64encode(bytes.fromhex(_hex(logical, 16))).decode()
        return f"{target}/{state.get('role')}/{state.get('member')}"
    if typ == "gcp:cloudscheduler/job:Job":
        name = state.setdefault("name", autoname)
        location = state.setdefault("region", region)
        # A new job is enabled; Cloud Scheduler reports it so until someone pauses it.
        state.update(project=project, state="ENABLED", paused=False)
        return f"projects/{project}/locations/{location}/jobs/{name}"
    if typ == "gcp:logging/metric:Metric":
        return state.setdefault("name", autoname)
    if module == "monitoring":
        collection = {
            "NotificationChannel": "notificationChannels",
            "AlertPolicy": "alertPolicies",
        }.get(resource)
        if collection:
            name = f"projects/{project}/{collection}/{_digits(logical, 19)}"
            state.update(name=name, project=project)
            for index, condition in enumerate(state.get("conditions") or []):
                condition["name"] = f"{name}/conditions/{_digits(f'{logical}{index}', 19)}"
            return name
        if resource == "Dashboard":
            dashboard = uuid.UUID(_hex(logical, 32))
            return f"projects/{project_number(project)}/dashboards/{dashboard}"
    if typ == "gcp:cloudquota/sQuotaPreference:SQuotaPreference":
        name = state.setdefault("name", autoname)
        config = dict(state.get("quotaConfig") or {})
        config.setdefault("grantedValue", "0")
        config.setdefault("traceId", _hex(logical, 32))
        state.update(quotaConfig=config, reconciling=True, etag=_hex(logical + "etag", 16))
        return (
            f"{state.get('parent', f'projects/{project}')}/locations/global/quotaPreferences/{name}"
        )
    if "name" in state:
        return state["name"]
    return f"projects/{project}/{resource[0].lower()}{resource[1:]}s/{autoname}"


def _cluster(state: dict, autoname: str, project: str, region: str) -> str:
    name = state.setdefault("name", autoname)
    location = state.get("location", region)
    private = dict(state.get("privateClusterConfig") or {})
    control_plane = ipaddress.ip_network(private.get("masterIpv4CidrBlock", "172.16.0.0/28"))
    private_endpoint = str(control_plane.network_address + 2)
    public_endpoint = f"34.{int(_hex(name, 2), 16) % 250 + 1}.{int(_hex(name + 'b', 2), 16)}.10"
    private.update(privateEndpoint=private_endpoint, publicEndpoint=public_endpoint)
    resource_id = f"projects/{project}/locations/{location}/clusters/{name}"
    state.update(
        project=project,
        location=location,
        selfLink=f"{CONTAINER}/{resource_id}",
        endpoint=private_endpoint if private.get("enablePrivateEndpoint") else public_endpoint,
        privateClusterConfig=private,
        masterAuth={
            **(state.get("masterAuth") or {}),
            "clusterCaCertificate": CA_CERTIFICATE,
        },
        masterVersion=state.get("minMasterVersion") or GKE_PATCH_VERSION,
        labelFingerprint=_hex(name + "labels", 8),
    )
    return resource_id


def gcp_invoke(token: str, args: dict, project: str, region: str) -> dict | None:
    """The answer to a pulumi-gcp data source, or None for one this engine does not model."""
    project = args.get("project") or args.get("projectId") or project
    number = project_number(project)
    if token == "gcp:organizations/getProject:getProject":
        return {
            "id": f"projects/{project}",
            "projectId": project,
            "number": number,
            "name": project,
            "labels": {},
        }
    if token == "gcp:storage/getProjectServiceAccount:getProjectServiceAccount":
        email = f"service-{number}@gs-project-accounts.iam.gserviceaccount.com"
        return {
            "id": email,
            "emailAddress": email,
            "member": f"serviceAccount:{email}",
            "project": project,
        }
    if token == "gcp:container/getCluster:getCluster":
        state = {"name": args["name"], "location": args.get("location") or region}
        resource_id = _cluster(state, args["name"], project, region)
        return {
            **state,
            "id": resource_id,
            "masterAuths": [state["masterAuth"]],
            "privateClusterConfigs": [state["privateClusterConfig"]],
            "workloadIdentityConfigs": [{"workloadPool": f"{project}.svc.id.goog"}],
        }
    return None
