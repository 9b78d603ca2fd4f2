"""The Pulumi program: reads the stack's config, builds the cloud's platform, then the
Kubernetes layer on it.

This is the only module that reads `pulumi.Config`; every component takes typed args.
"""

from __future__ import annotations

import json

import pulumi
from pulumi.runtime import config as runtime_config

from components.aws.platform import build_aws
from components.config import ConfigError, StackConfig, load_config
from components.gcp.platform import build_gcp
from components.k8s.layer import build_kubernetes

BUILDERS = {"aws": build_aws, "gcp": build_gcp}


def project_keys(namespace: str) -> list[str]:
    """Every key the stack sets under this project's namespace, known to the schema or not: a
    misspelt section must be an error, never silently dropped."""
    prefix = f"{namespace}:"
    keys = {*runtime_config.CONFIG.get(), *runtime_config.get_config_env()}
    return sorted(key.removeprefix(prefix) for key in keys if key.startswith(prefix))


def read_stack_config() -> StackConfig:
    """Each top-level schema field is one config key; structured values arrive JSON-encoded."""
    config = pulumi.Config()
    raw = {}
    for field in project_keys(config.name):
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
try:
    platform = BUILDERS[settings.cloud](settings)
except ConfigError as exc:  # a check against the account, e.g. its quotas now
    raise pulumi.RunError(str(ConfigError(exc.problems, pulumi.Config().name))) from None
build_kubernetes(settings, platform)
