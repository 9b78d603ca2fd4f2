"""The training image's repository: the stack's own ECR repository, so the image the templates
pin by digest lives in the account that runs it (nodes pull with their role, no registry secret).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from components.registry import UNTAGGED_EXPIRE_DAYS


@dataclass(frozen=True)
class ImageRepositoryArgs:
    repository_name: str
    tags: dict[str, str] = field(default_factory=dict)


class ImageRepository(pulumi.ComponentResource):
    url: pulumi.Output[str]

    def __init__(
        self, name: str, args: ImageRepositoryArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:registry:ImageRepository", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        # Immutable tags: a tag names one image forever, like the digests the templates pin.
        repository = aws.ecr.Repository(
            f"{name}-repository",
            name=args.repository_name,
            image_tag_mutability="IMMUTABLE",
            image_scanning_configuration={"scan_on_push": True},
            encryption_configurations=[{"encryption_type": "KMS"}],
            force_delete=False,
            tags=args.tags,
            opts=child,
        )
        aws.ecr.LifecyclePolicy(
            f"{name}-lifecycle",
            repository=repository.name,
            policy=json.dumps(
                {
                    "rules": [
                        {
                            "rulePriority": 1,
                            "description": "Expire untagged images",
                            "selection": {
                                "tagStatus": "untagged",
                                "countType": "sinceImagePushed",
                                "countUnit": "days",
                                "countNumber": UNTAGGED_EXPIRE_DAYS,
                            },
                            "action": {"type": "expire"},
                        }
                    ]
                }
            ),
            opts=child,
        )
        self.url = repository.repository_url
        self.register_outputs({"url": self.url})
