import pulumi_kubernetes as k8s

k8s.batch.v1.Job(
    "train",
    metadata={"name": "train", "namespace": "team-vision"},
    spec={
        "backoffLimit": 3,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "tolerations": [
                    {
                        "key": "capacity-type",
                        "operator": "Equal",
                        "value": "spot",
                        "effect": "NoSchedule",
                    }
                ],
                "containers": [{"name": "train", "image": "registry.example.com/train:1"}],
            }
        },
    },
)
