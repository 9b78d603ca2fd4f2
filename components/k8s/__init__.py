"""The cloud-neutral Kubernetes layer: team namespaces, priorities, Kueue queues, job templates,
interruption handling, alert rules and dashboards."""
