"""The cloud drill's interruptions on real capacity: what `spotctl drill --cloud-run` takes away.

EKS: the stack's AWS FIS experiment template (components/aws/drill.py), found by its tags in
ListExperimentTemplates, started with StartExperiment and followed with GetExperiment until its
state is final (the FIS API reference: pending, initiating, running, then completed, stopped,
failed or cancelled). GKE: Compute Engine's `instances.simulateMaintenanceEvent` on a share of
one class's Spot VMs, which preempts a Spot VM with its usual notice ("Simulate a host
maintenance event"), each operation followed with `zoneOperations.wait` until DONE. GKE names
every node VM's pool in the label `goog-k8s-node-pool-name`.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from components.aws.drill import DRILL_TAG
from components.config import StackConfig
from components.gcp.nodepools import class_pool_name
from components.pools import spot_pool

POLL_S = 10.0
"""Seconds between two reads of an experiment's state."""
FIS_FINAL = ("completed", "stopped", "failed", "cancelled")
COMPUTE_API = "https://compute.googleapis.com/compute/v1/"
COMPUTE_ENDPOINT_ENV = "CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE"
"""gcloud's override of the Compute API's address, honoured here the same way."""
CLUSTER_LABEL = "goog-k8s-cluster-name"
POOL_LABEL = "goog-k8s-node-pool-name"

Wait = Callable[[float], None]


class CloudRunError(Exception):
    """The cloud refused or failed the drill; the message says what, in one line."""


@dataclass(frozen=True)
class Interrupted:
    """What the drill took away, and when: unix seconds."""

    started_at: float
    ended_at: float
    target: dict[str, Any]


class FisDrill:
    """The stack's experiment template: spot interruption notices to a share of one class's spot
    nodes, as aws.spot_drill configures it."""

    def __init__(self, settings: StackConfig, stack: str, client: Any = None) -> None:
        drill = settings.aws.spot_drill
        if drill is None:
            raise CloudRunError(
                f"stack {stack} sets no aws.spot_drill: its experiment template is opt-in "
                "(docs/operations.md)"
            )
        self.pool = spot_pool(settings, drill.gpu_class).name  # the config names one of its classes
        self.tags = {"env": settings.environment, DRILL_TAG: self.pool}
        self.percent = drill.percent
        if client is None:
            import boto3

            client = boto3.client("fis", region_name=settings.region)
        self.client = client

    def targets(self) -> dict[str, Any]:
        """The one template that carries the stack's tags: what the drill starts."""
        found, token = [], None
        while True:
            page = self._call(
                "ListExperimentTemplates",
                self.client.list_experiment_templates,
                **({"nextToken": token} if token else {}),
            )
            found += [
                t
                for t in page.get("experimentTemplates", [])
                if all(t.get("tags", {}).get(k) == v for k, v in self.tags.items())
            ]
            token = page.get("nextToken")
            if not token:
                break
        wanted = ", ".join(f"{k}={v}" for k, v in self.tags.items())
        if not found:
            raise CloudRunError(
                f"no FIS experiment template tagged {wanted}: has `pulumi up` run with "
                "aws.spot_drill set?"
            )
        if len(found) > 1:
            ids = ", ".join(sorted(t["id"] for t in found))
            raise CloudRunError(f"{len(found)} FIS experiment templates tagged {wanted}: {ids}")
        return found[0]

    def plan(self, t: dict[str, Any]) -> list[str]:
        return [
            f"start FIS experiment template {t['id']} ({t.get('description', '')}): "
            f"the two-minute spot interruption notice to {self.percent}% of the running spot "
            f"nodes of Karpenter NodePool {self.pool}",
            f"wait for the experiment to end, reading its state every {POLL_S:g} s",
        ]

    def run(self, template: dict[str, Any], wait: Wait) -> Interrupted:
        started = self._call(
            "StartExperiment",
            self.client.start_experiment,
            experimentTemplateId=template["id"],
        )["experiment"]
        while True:
            experiment = self._call("GetExperiment", self.client.get_experiment, id=started["id"])[
                "experiment"
            ]
            state = experiment["state"]
            if state["status"] in FIS_FINAL:
                break
            wait(POLL_S)
        if state["status"] != "completed":
            raise CloudRunError(
                f"FIS experiment {started['id']} ended {state['status']}: "
                f"{state.get('reason', 'no reason given')}"
            )
        start = experiment.get("startTime") or experiment["creationTime"]
        end = experiment.get("endTime") or start
        return Interrupted(
            start.timestamp(),
            end.timestamp(),
            {"experiment_template_id": template["id"], "experiment_id": started["id"]},
        )

    @staticmethod
    def _call(name: str, method: Callable[..., dict], **kwargs: Any) -> dict:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return method(**kwargs)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            raise CloudRunError(
                f"FIS {name}: {error.get('Code', 'error')}: {error.get('Message', exc)}"
            ) from None
        except BotoCoreError as exc:
            raise CloudRunError(f"FIS {name}: {exc}") from None


class GkeDrill:
    """A host maintenance event on a share of one class's running Spot VMs."""

    def __init__(
        self, settings: StackConfig, gpu_class: str, percent: int, session: Any = None
    ) -> None:
        if not 1 <= percent <= 100:
            raise CloudRunError(f"--percent must be within 1..100, not {percent}")
        pool = spot_pool(settings, gpu_class)
        if pool is None:
            known = ", ".join(c.name for c in settings.gpu_classes)
            raise CloudRunError(f"--gpu-class {gpu_class!r} is not a class of the stack ({known})")
        self.node_pools = [class_pool_name(pool, machine) for machine in pool.instance_types]
        self.cluster = settings.gcp.cluster.name
        self.project = settings.gcp.project
        self.percent = percent
        self.api = os.environ.get(COMPUTE_ENDPOINT_ENV, COMPUTE_API).rstrip("/") + "/"
        if session is None:
            import google.auth
            from google.auth.exceptions import DefaultCredentialsError
            from google.auth.transport.requests import AuthorizedSession

            try:
                credentials, _ = google.auth.default(
                    scopes=["https://www.googleapis.com/auth/cloud-platform"]
                )
            except DefaultCredentialsError as exc:
                raise CloudRunError(f"no Google credentials: {str(exc).splitlines()[0]}") from None
            session = AuthorizedSession(credentials)
        self.session = session

    def nodes(self) -> list[tuple[str, str]]:
        """(zone, name) of the class's running Spot VMs, by name."""
        found = []
        for node_pool in self.node_pools:
            query = (
                f'(labels.{CLUSTER_LABEL} = "{self.cluster}") '
                f'(labels.{POOL_LABEL} = "{node_pool}") (status = "RUNNING")'
            )
            token = None
            while True:
                params = {"filter": query, **({"pageToken": token} if token else {})}
                page = self._call("GET", f"projects/{self.project}/aggregated/instances", params)
                for scope in page.get("items", {}).values():
                    for vm in scope.get("instances", []):
                        found.append((vm["zone"].rsplit("/", 1)[-1], vm["name"]))
                token = page.get("nextPageToken")
                if not token:
                    break
        return sorted(found, key=lambda node: node[1])

    def targets(self) -> list[tuple[str, str]]:
        """(zone, name) of the VMs the drill preempts: the first of the running ones by name."""
        nodes = self.nodes()
        if not nodes:
            raise CloudRunError(
                f"no running Spot VM in node pools {', '.join(self.node_pools)} of cluster "
                f"{self.cluster}: start training on the class first"
            )
        return nodes[: math.ceil(len(nodes) * self.percent / 100)]

    def plan(self, nodes: list[tuple[str, str]]) -> list[str]:
        return [
            f"simulate a host maintenance event (Spot preemption with its notice) on "
            f"{len(nodes)} Spot VM(s) of node pools {', '.join(self.node_pools)} "
            f"({self.percent}%): " + ", ".join(f"{name} ({zone})" for zone, name in nodes),
            "wait for each operation to be DONE",
        ]

    def run(self, nodes: list[tuple[str, str]], wait: Wait) -> Interrupted:
        start = time.time()
        operations = [
            (
                zone,
                self._call(
                    "POST",
                    f"projects/{self.project}/zones/{zone}/instances/{name}/"
                    "simulateMaintenanceEvent",
                ),
            )
            for zone, name in nodes
        ]
        for zone, operation in operations:
            while operation.get("status") != "DONE":
                operation = self._call(
                    "POST",
                    f"projects/{self.project}/zones/{zone}/operations/{operation['name']}/wait",
                )
            if "error" in operation:
                errors = operation["error"].get("errors") or [{}]
                raise CloudRunError(
                    f"simulateMaintenanceEvent on {operation.get('targetLink', '?')}: "
                    f"{errors[0].get('message', errors[0].get('code', 'failed'))}"
                )
        return Interrupted(start, time.time(), {"nodes": [f"{z}/{n}" for z, n in nodes]})

    def _call(self, method: str, path: str, params: dict | None = None) -> dict:
        import requests
        from google.auth.exceptions import GoogleAuthError

        try:
            answer = self.session.request(method, self.api + path, params=params, timeout=150)
        except (requests.RequestException, GoogleAuthError) as exc:
            raise CloudRunError(f"Compute API {path}: {str(exc).splitlines()[0]}") from None
        if answer.status_code != 200:
            try:
                message = answer.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = answer.text[:200]
            raise CloudRunError(f"Compute API {path}: HTTP {answer.status_code}: {message}")
        return answer.json()
