"""The Pulumi program: reads the stack's config, builds the cloud's platform, then the
Kubernetes layer on it.

This is the only module that reads `pulumi.Config`; every component takes typed args.
"""

from __future__ import annotations

import pulumi
from pulumi.runtime import config as runtime_config

from components.config import ConfigError, StackConfig, load_values


def stack_values() -> dict[str, str]:
    """Every key the stack sets, in any namespace, known to the schema or not: a misspelt
    section or project name must be an error, never silently dropped."""
    keys = {*runtime_config.CONFIG.get(), *runtime_config.get_config_env()}
    values = {key: runtime_config.get_config(key) for key in keys}
    return {key: value for key, value in values.items() if value is not None}


def read_stack_config() -> StackConfig:
    """Each top-level schema field is one config key; structured values arrive JSON-encoded, and
    the keys that hold an encrypted value are marked secret."""
    namespace = pulumi.get_project()
    values = stack_values()
    secret_keys = [key for key in values if runtime_config.is_config_secret(key)]
    try:
        return load_values(values, namespace, secret_keys)
    except ConfigError as exc:
        raise pulumi.RunError(str(exc)) from None


def build(settings: StackConfig) -> None:
    """The cloud's platform, then the Kubernetes layer on it. Their modules load here, once the
    config is valid, and only the stack's cloud's: the provider SDKs take seconds to load, and a
    config error need not wait for them."""
    from components.k8s.layer import build_kubernetes

    if settings.cloud == "aws":
        from components.aws.platform import build_aws as build_platform
    else:
        from components.gcp.platform import build_gcp as build_platform
    try:
        platform = build_platform(settings)
    except ConfigError as exc:  # a check against the account, e.g. its quotas now
        raise pulumi.RunError(str(ConfigError(exc.problems, pulumi.Config().name))) from None
    build_kubernetes(settings, platform)


build(read_stack_config())
