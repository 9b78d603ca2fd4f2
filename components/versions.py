"""Every version the platform pins, in one table.

The components read their pins from here, `docs/versions.md` is generated from it, and the
quarterly review reads it: an upgrade is a change to this file (and to nothing else, except where
a test names the file that must agree with it: `pyproject.toml` for providers, the training
image's Dockerfile for its base).

Regenerate the doc after a change: `python -m components.versions`; `--check` fails while the doc
is stale (the tests run it).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from components.generated_docs import GeneratedSection

REPO = Path(__file__).resolve().parents[1]
DOC = GeneratedSection(
    REPO / "docs" / "versions.md",
    "versions-table",
    "python -m components.versions",
)


@dataclass(frozen=True)
class KubernetesRelease:
    """One EKS Kubernetes minor version and the EKS add-on versions built for it."""

    version: str
    standard_support_ends: date
    extended_support_ends: date
    # EKS add-on name -> version (`aws eks describe-addon-versions --kubernetes-version V`).
    addons: dict[str, str]


@dataclass(frozen=True)
class Chart:
    """A Helm chart the platform installs."""

    name: str
    version: str
    chart: str  # what Helm installs: the chart name in `repository`, or an oci:// reference
    repository: str | None
    namespace: str
    # API groups whose CustomResourceDefinitions this chart installs: custom resources of these
    # groups wait for its release.
    crd_groups: tuple[str, ...] = ()


# The EKS add-ons the platform manages, and the namespace each runs in.
ADDON_NAMESPACES = {
    "vpc-cni": "kube-system",
    "kube-proxy": "kube-system",
    "coredns": "kube-system",
    "eks-pod-identity-agent": "kube-system",
    "amazon-cloudwatch-observability": "amazon-cloudwatch",
    "aws-ebs-csi-driver": "kube-system",
}

# Kubernetes minor versions a stack may run, newest last. During an upgrade both the old and the
# new minor are listed, so dev can move first (docs/deploy.md, "Upgrading Kubernetes").
KUBERNETES_RELEASES = {
    "1.35": KubernetesRelease(
        version="1.35",
        standard_support_ends=date(2027, 3, 27),
        extended_support_ends=date(2028, 3, 27),
        addons={
            "vpc-cni": "v1.20.1-eksbuild.3",
            "kube-proxy": "v1.35.3-eksbuild.2",
            "coredns": "v1.14.2-eksbuild.4",
            "eks-pod-identity-agent": "v1.3.7-eksbuild.2",
            "amazon-cloudwatch-observability": "v4.1.0-eksbuild.1",
            "aws-ebs-csi-driver": "v1.59.0-eksbuild.1",
        },
    ),
}
KUBERNETES_VERSION = "1.35"  # what a new cluster runs unless its stack names another listed minor
# EXTENDED: EKS never upgrades the control plane on its own when standard support ends (it would
# leave the node groups a minor behind); upgrades happen here, on the team's schedule.
UPGRADE_SUPPORT_TYPE = "EXTENDED"

# Karpenter's alias of the NVIDIA-capable EKS AMI of the GPU nodes (the default of
# `aws.gpu_ami.alias`), pinned: a new AMI is rolled out by changing it, never by surprise.
GPU_AMI_ALIAS = "al2023@v20260903"

KUBE_PROMETHEUS_STACK = Chart(
    name="kube-prometheus-stack",
    version="88.5.3",
    chart="kube-prometheus-stack",
    repository="https://prometheus-community.github.io/helm-charts",
    namespace="monitoring",
    crd_groups=("monitoring.coreos.com",),
)
KUEUE = Chart(
    name="kueue",
    version="0.19.2",
    chart="oci://registry.k8s.io/kueue/charts/kueue",
    repository=None,
    namespace="kueue-system",
    crd_groups=("kueue.x-k8s.io",),
)
KARPENTER_VERSION = "1.14.1"  # the controller and its CRDs move together
# Karpenter's CRDs as a chart of their own, so that an upgrade updates them (Helm never does for a
# chart's crds/ folder).
KARPENTER_CRD = Chart(
    name="karpenter-crd",
    version=KARPENTER_VERSION,
    chart="oci://public.ecr.aws/karpenter/karpenter-crd",
    repository=None,
    namespace="kube-system",
    crd_groups=("karpenter.sh", "karpenter.k8s.aws"),
)
KARPENTER = Chart(
    name="karpenter",
    version=KARPENTER_VERSION,
    chart="oci://public.ecr.aws/karpenter/karpenter",
    repository=None,
    namespace="kube-system",
)
NVIDIA_DEVICE_PLUGIN = Chart(
    name="nvidia-device-plugin",
    version="0.20.0",
    chart="nvidia-device-plugin",
    repository="https://nvidia.github.io/k8s-device-plugin",
    namespace="kube-system",
)
# Advertises `vpc.amazonaws.com/efa` on nodes with EFA interfaces (Karpenter attaches them to a
# node launched for pods that request them).
EFA_DEVICE_PLUGIN = Chart(
    name="aws-efa-k8s-device-plugin",
    version="v0.5.30",
    chart="aws-efa-k8s-device-plugin",
    repository="https://aws.github.io/eks-charts",
    namespace="kube-system",
)
CHARTS = (
    KUBE_PROMETHEUS_STACK,
    KUEUE,
    KARPENTER_CRD,
    KARPENTER,
    NVIDIA_DEVICE_PLUGIN,
    EFA_DEVICE_PLUGIN,
)

# GKE: the lowest control-plane version a new cluster asks for and its release channel (the
# channel upgrades control plane and nodes together from there), and the NVIDIA driver GKE
# installs on GPU nodes: DEFAULT is the driver GKE tests with the node's version, so it follows
# node upgrades.
GKE_VERSION = "1.35"
GKE_RELEASE_CHANNEL = "REGULAR"
GKE_GPU_DRIVER_VERSION = "DEFAULT"

# Pulumi SDK and providers: the ranges in pyproject.toml (a test keeps the two equal).
PROVIDERS = {
    "pulumi": ">=3.250,<4",
    "pulumi-aws": ">=7.0,<8",
    "pulumi-gcp": ">=10.0,<11",
    "pulumi-kubernetes": ">=4.18,<5",
}
# The training image's base (training-image/Dockerfile's FROM; a test keeps the two equal).
TRAINING_IMAGE_BASE = "python:3.12.12-slim-bookworm"
# The training image's torch release is pinned where both the image and the tests install it.
TORCH_PIN = REPO / "training-image" / "torch.txt"


# Namespaces that belong to Kubernetes itself or to what the platform installs.
RESERVED_NAMESPACES = tuple(
    sorted(
        {"default", "kube-system", "kube-public", "kube-node-lease"}
        | set(ADDON_NAMESPACES.values())
        | {chart.namespace for chart in CHARTS}
    )
)


def render_tables() -> str:
    lines = [
        "| Component | Kind | Version | Source |",
        "|---|---|---|---|",
    ]
    for release in KUBERNETES_RELEASES.values():
        default = " (default)" if release.version == KUBERNETES_VERSION else ""
        lines.append(
            f"| Kubernetes (EKS){default} | control plane, node groups | {release.version} "
            f"| standard support to {release.standard_support_ends}, extended to "
            f"{release.extended_support_ends}; upgrade policy {UPGRADE_SUPPORT_TYPE} |"
        )
        for addon, version in release.addons.items():
            lines.append(
                f"| {addon} | EKS add-on for {release.version} | {version} "
                f"| namespace {ADDON_NAMESPACES[addon]} |"
            )
    lines.append(
        f"| GPU node AMI | Karpenter AMI alias | `{GPU_AMI_ALIAS}` | EKS-optimized AL2023 NVIDIA, "
        "default of aws.gpu_ami.alias |"
    )
    lines.append(
        f"| Kubernetes (GKE) | control plane, node pools | {GKE_VERSION} or later | release "
        f"channel {GKE_RELEASE_CHANNEL}, defaults of gcp.cluster.create |"
    )
    lines.append(
        f"| NVIDIA driver (GKE) | GPU driver installation | `{GKE_GPU_DRIVER_VERSION}` | GKE's "
        "tested driver for the node version |"
    )
    for chart in CHARTS:
        source = chart.repository or chart.chart
        lines.append(
            f"| {chart.name} | Helm chart | {chart.version} | {source}, "
            f"namespace {chart.namespace} |"
        )
    for package, spec in PROVIDERS.items():
        lines.append(f"| {package} | Pulumi SDK / provider | `{spec}` | PyPI, pyproject.toml |")
    lines.append(
        f"| training image base | container image | `{TRAINING_IMAGE_BASE}` "
        "| Docker Hub, training-image/Dockerfile |"
    )
    (torch,) = [
        line for line in TORCH_PIN.read_text().splitlines() if line and not line.startswith("#")
    ]
    lines.append(
        f"| torch (training image) | Python package | `{torch}` "
        "| PyTorch's CUDA index (the tests: its CPU build), training-image/torch.txt |"
    )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    return DOC.regenerate(render_tables(), argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
