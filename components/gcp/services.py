"""The Google APIs the platform calls, enabled before anything that calls them.

A new project has only a few APIs on (Service Usage among them, which turns the others on). Every
other resource of the stack, and every lookup it makes (the project's number through Cloud
Resource Manager, the Cloud Storage service agent), waits for these.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

# What each API is for: Resource Manager answers `get_project` and holds the project's IAM policy;
# IAM, service accounts and custom roles; Compute Engine, the VPC and the nodes; GKE; Cloud KMS,
# the CMEK keys; Cloud Storage, the bucket; Artifact Registry, the image; Logging and Monitoring,
# the preemption metric, alerts and dashboard; Cloud Quotas, the quota preferences.
PLATFORM_APIS = (
    "cloudresourcemanager.googleapis.com",
    "iam.googleapis.com",
    "compute.googleapis.com",
    "container.googleapis.com",
    "cloudkms.googleapis.com",
    "storage.googleapis.com",
    "artifactregistry.googleapis.com",
    "logging.googleapis.com",
    "monitoring.googleapis.com",
    "cloudquotas.googleapis.com",
)
# Only with a buffer pool: its Cloud Scheduler jobs.
SCHEDULER_API = "cloudscheduler.googleapis.com"
# Only with image streaming: GKE's requirement for it (the Container File System API).
IMAGE_STREAMING_API = "containerfilesystem.googleapis.com"


@dataclass(frozen=True)
class ProjectServicesArgs:
    project: str
    services: Sequence[str]

    def __post_init__(self) -> None:
        odd = [s for s in self.services if not s.endswith(".googleapis.com")]
        if odd:
            raise ValueError(f"ProjectServicesArgs.services: {odd} are not Google API names")


class ProjectServices(pulumi.ComponentResource):
    """One `google_project_service` per API. Destroying the stack leaves them on: other things in
    the project may use them."""

    def __init__(
        self, name: str, args: ProjectServicesArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:gcp:ProjectServices", name, None, opts)
        for service in args.services:
            gcp.projects.Service(
                f"{name}-{service.removesuffix('.googleapis.com')}",
                project=args.project,
                service=service,
                disable_on_destroy=False,
                disable_dependent_services=False,
                opts=pulumi.ResourceOptions(parent=self),
            )
        self.register_outputs({})


def invoke_options(
    parent: pulumi.Resource, opts: pulumi.ResourceOptions | None
) -> pulumi.InvokeOutputOptions:
    """Options for a lookup inside a component: it waits for what the component waits for (the
    project's APIs), which a lookup does not inherit from its parent."""
    return pulumi.InvokeOutputOptions(parent=parent, depends_on=opts.depends_on if opts else None)
