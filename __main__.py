"""The Pulumi program: reads the stack's config, builds the cloud's platform, then the
Kubernetes layer on it.

This is the only module that reads `pulumi.Config`; every component takes typed args.
"""

from __future__ import annotations

import json

import pulumi

from components.aws.platform import build_aws
from components.config import ConfigError, StackConfig, load_config
from components.k8s.layer import build_kubernetes

BUILDERS = {"aws": build_aws}


def read_stack_config() -> StackConfig:
    """Each top-level schema field is one config key; structured values arrive JSON-encoded."""
    config = pulumi.Config()
    raw = {}
    for field in StackConfig.model_fields:
        value = config.get(field)
        if value is None:
            continue
        try:
            raw[field] = json.loads(value)
        except json.JSONDecodeError:
            raw[field] = value  # a plain string such as `environment: dev`
    try:
        return load_config(raw, namespace=config.name)
    except ConfigError as exc:
        raise pulumi.RunError(str(exc)) from None


settings = read_stack_config()
build_kubernetes(settings, BUILDERS[settings.cloud](settings))
