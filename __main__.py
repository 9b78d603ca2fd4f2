"""The Pulumi program: reads the stack's config and builds the platform.

This is the only module that reads `pulumi.Config`; every component takes typed args.
"""

import json

import pulumi

from components.config import ConfigError, StackConfig, load_config


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
