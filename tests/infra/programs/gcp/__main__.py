"""Reads a GCP stack's config as the repository's program does, builds the GCP platform and the
Kubernetes layer on it."""

import json

import pulumi

from components.config import ConfigError
from components.gcp.config import GcpStackConfig, load_gcp_config
from components.gcp.platform import build_gcp
from components.k8s.layer import build_kubernetes

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
build_kubernetes(settings, build_gcp(settings))
