"""From an interruption to the trainer running on a new GPU node: the node's provisioning, the
training image (pulled, streamed or already on the node), the process's start. The restore
comes on top (costs.py). Each figure is published, with its source; measure yours (the ledger's
`pod_start` badput, docs/goodput.md) and pass --restart-s.
"""

from __future__ import annotations

from dataclasses import dataclass

PULL, STREAM, CACHE = "pull", "stream", "cache"
IMAGE_MECHANISMS = (PULL, STREAM, CACHE)
CLOUDS_OF = {PULL: ("aws", "gcp"), STREAM: ("gcp",), CACHE: ("aws",)}
STACK_SETTING = {
    PULL: "neither gcp.image_streaming nor aws.gpu_ami.image_cache_snapshot",
    STREAM: "gcp.image_streaming",
    CACHE: "aws.gpu_ami.image_cache_snapshot",
}
"""The stack setting that makes each way the one in use."""

NODE_PROVISION_S = 90.0
"""A new node launched and joined: 45-90 s with Karpenter on EKS (EKS scaling guide of the
devfloor9 engineering playbook, "Karpenter-based EKS scaling strategies"); the upper end for a
GPU node, whose device plugin must also come up."""
PULL_GB_PER_S = 0.06
"""A plain pull and unpack: 15-20 GB images in 4-6 minutes per instance (AWS Machine Learning
Blog, "Reducing container cold start times using SOCI index on DLAMI and DLC")."""
STREAM_S = 2.0
"""GKE image streaming: from ImagePulling to Running "in a couple of seconds (regardless of
container size)" (Google Cloud blog, "Introducing GKE image streaming", 2021); the data the
process reads at start then streams, which this does not count."""
CACHE_S = 0.0
"""EKS image cache: the image is on the node's data volume, made from a snapshot (docs/deploy.md;
AWS Containers blog, "Reduce container startup time on Amazon EKS with Bottlerocket data
volume"); the snapshot's blocks load from S3 on first read, which this does not count."""
PROCESS_START_S = 10.0
"""Python, torch's imports and the CUDA context: about 5 s for the context and a first tensor
(pytorch/pytorch#22583), the imports on top."""
TRAINING_IMAGE_GB = 6.0
"""The training image (training-image/Dockerfile): Python on Debian slim, torch's CUDA build and
the NVIDIA libraries its wheels bring, 3.3 GB of them in site-packages alone (cuDNN 1.2 GB,
cuBLAS 0.7 GB, ...; as listed in IBM/text-generation-inference#50). An estimate, not a
measurement: pass `docker image inspect`'s size of your build as --image-gb."""
SOURCES = {
    "node_provision_s": "45-90 s with Karpenter (devfloor9 EKS scaling guide); GPU nodes at "
    "the upper end",
    PULL: "15-20 GB in 4-6 min per instance (AWS ML Blog, SOCI index on DLAMI and DLC)",
    STREAM: "a couple of seconds regardless of size (Google Cloud blog, GKE image streaming)",
    CACHE: "the image is on the node's data volume from a snapshot (AWS Containers blog, "
    "Bottlerocket data volume)",
    "process_start_s": "CUDA context and first tensor about 5 s (pytorch/pytorch#22583), "
    "imports on top",
}


@dataclass(frozen=True)
class NodeStart:
    image_gb: float = TRAINING_IMAGE_GB
    mechanism: str = PULL

    @property
    def image_s(self) -> float:
        if self.mechanism == STREAM:
            return STREAM_S
        if self.mechanism == CACHE:
            return CACHE_S
        return self.image_gb / PULL_GB_PER_S

    @property
    def total_s(self) -> float:
        return NODE_PROVISION_S + self.image_s + PROCESS_START_S

    def assumptions(self, image_gb_given: bool) -> dict:
        return {
            "node_start_s": self.total_s,
            "node_provision_s": NODE_PROVISION_S,
            "image_gb": self.image_gb,
            "image_gb_source": "--image-gb"
            if image_gb_given
            else "the training image, estimated (spotctl/plan/node_start.py)",
            "image": self.mechanism,
            "image_s": self.image_s,
            "image_source": SOURCES[self.mechanism]
            + (f" ({PULL_GB_PER_S:g} GB/s)" if self.mechanism == PULL else ""),
            "process_start_s": PROCESS_START_S,
            "node_start_sources": {
                key: SOURCES[key] for key in ("node_provision_s", "process_start_s")
            },
        }
