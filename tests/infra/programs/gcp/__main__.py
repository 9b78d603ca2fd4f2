"""Reads a GCP stack's config as the repository's program does and builds the GCP platform."""

import json

import pulumi

from components.config import ConfigError
from components.gcp.config import GcpStackConfig, load_gcp_config
from components.gcp.platform import build_gcp

config = pulumi.Config()
raw = {}
for field in GcpStackConfig.model_fields:
    value = config.get(field)
    if value is not None:
        try:
            raw[field] = json.loads(value)
        except json.JSONDecodeError:
            raw[field] = value
try:
    settings = load_gcp_config(raw, namespace=config.name)
except ConfigError as exc:
    raise pulumi.RunError(str(exc)) from None
build_gcp(settings)
