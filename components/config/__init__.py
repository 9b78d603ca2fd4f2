"""The stack config: its schema, how a stack file is read and loaded, and the capacity checks.

Modules, side by side:
- `stack`: the root (`StackConfig`) and the settings every cloud shares (teams, GPU classes);
- `aws`, `gcp`, `kubernetes`: one section each; `schema`: the blocks they are built of;
- `files`: the program's stack files as the Pulumi CLI reads them (`stackConfigDir`, Pulumi.yaml's
  `config:` defaults), for everything that reads one outside the engine;
- `document` and `loading`: from config values to a validated `StackConfig`, or a `ConfigError`;
- `capacity`: whether the stack's capacity can run its jobs, measured against the catalog.

This face re-exports what the components and the CLI import from it.
"""

from components.config.aws import (
    INTERRUPTION_QUEUE_RETENTION_SECONDS,
    ExistingCluster,
    NewCluster,
    OnDemandGpuVcpuQuota,
    ScheduledSize,
    SpotGpuVcpuQuota,
    Transition,
)
from components.config.kubernetes import (
    NOTICE_SECONDS,
    NOTICE_SOURCES,
    UNBUILT_IMAGE,
    KubernetesConfig,
    KueueConfig,
    MonitoringConfig,
    NoticeWindow,
)
from components.config.loading import ConfigError, load_config, load_values
from components.config.stack import StackConfig

__all__ = [
    "INTERRUPTION_QUEUE_RETENTION_SECONDS",
    "NOTICE_SECONDS",
    "NOTICE_SOURCES",
    "UNBUILT_IMAGE",
    "ConfigError",
    "ExistingCluster",
    "KubernetesConfig",
    "KueueConfig",
    "MonitoringConfig",
    "NewCluster",
    "NoticeWindow",
    "OnDemandGpuVcpuQuota",
    "ScheduledSize",
    "SpotGpuVcpuQuota",
    "StackConfig",
    "Transition",
    "load_config",
    "load_values",
]
