"""The training image's repository: the stack's own Artifact Registry repository, so the image the
templates pin by digest lives in the project that runs it (nodes pull with their service
account's reader role, no registry secret)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

from components.registry import UNTAGGED_EXPIRE_DAYS


@dataclass(frozen=True)
class ImageRepositoryArgs:
    project: str
    location: str
    repository_id: str
    labels: dict[str, str] = field(default_factory=dict)


class ImageRepository(pulumi.ComponentResource):
    url: pulumi.Output[str]

    def __init__(
        self, name: str, args: ImageRepositoryArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:gcp:ImageRepository", name, None, opts)
        repository = gcp.artifactregistry.Repository(
            f"{name}-repository",
            project=args.project,
            location=args.location,
            repository_id=args.repository_id,
            format="DOCKER",
            # Immutable tags: a tag names one image forever, like the digests the templates pin.
            docker_config={"immutable_tags": True},
            cleanup_policies=[
                {
                    "id": "expire-untagged",
                    "action": "DELETE",
                    "condition": {
                        "tag_state": "UNTAGGED",
                        "older_than": f"{UNTAGGED_EXPIRE_DAYS * 86400}s",
                    },
                }
            ],
            cleanup_policy_dry_run=False,
            labels=args.labels,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.url = repository.registry_uri
        self.register_outputs({"url": self.url})
