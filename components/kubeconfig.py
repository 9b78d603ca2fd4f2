"""A kubeconfig for one cluster whose user authenticates through an exec plugin: short-lived
tokens from the cloud's CLI, never a stored secret."""

from __future__ import annotations

import json


def exec_kubeconfig(name: str, server: str, ca_data: str, user_exec: dict) -> str:
    """The kubeconfig document (JSON) for `server`, trusting `ca_data` (base64 PEM)."""
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", **user_exec}}
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": name, "cluster": {"server": server, "certificate-authority-data": ca_data}}
            ],
            "users": [{"name": name, "user": user}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
            "current-context": name,
        }
    )
