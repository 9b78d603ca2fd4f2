"""The stack config: its schema, how a stack file is read and loaded, and the capacity checks.

Modules, side by side:
- `stack`: the root (`StackConfig`) and the settings every cloud shares (teams, GPU classes);
- `aws`, `gcp`, `kubernetes`: one section each; `schema`: the blocks they are built of;
- `files`: the program's stack files as the Pulumi CLI reads them (`stackConfigDir`, Pulumi.yaml's
  `config:` defaults), for everything that reads one outside the engine;
- `document` and `loading`: from config values to a validated `StackConfig`, or a `ConfigError`;
- `capacity`: whether the stack's capacity can run its jobs, measured against the catalog.

This face re-exports what the components and the CLI import from it, each name on first use
(PEP 562): a command that needs one constant does not build every schema.
"""

import importlib

# Each name of the face, and the module that defines it.
_FACE = {
    "INTERRUPTION_QUEUE_RETENTION_SECONDS": "aws",
    "ExistingCluster": "aws",
    "NewCluster": "aws",
    "OnDemandGpuVcpuQuota": "aws",
    "ScheduledSize": "aws",
    "SpotGpuVcpuQuota": "aws",
    "Transition": "aws",
    "NOTICE_SECONDS": "kubernetes",
    "NOTICE_SOURCES": "kubernetes",
    "UNBUILT_IMAGE": "kubernetes",
    "KubernetesConfig": "kubernetes",
    "KueueConfig": "kubernetes",
    "MonitoringConfig": "kubernetes",
    "NoticeWindow": "kubernetes",
    "ConfigError": "loading",
    "load_config": "loading",
    "load_values": "loading",
    "StackConfig": "stack",
}

__all__ = sorted(_FACE)


def __getattr__(name: str) -> object:
    if name not in _FACE:
        raise AttributeError(f"module 'components.config' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"components.config.{_FACE[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_FACE})
