"""GCP implementation of the platform: GKE, GCS, Workload Identity, Cloud Monitoring."""
