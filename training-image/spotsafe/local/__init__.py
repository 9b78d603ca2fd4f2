"""Local stand-ins for the cloud, for the drill, the benchmark and tests (the `[local]` extra).

`servers`: the S3 API (moto) and the GCS API (fake-gcs-server) on loopback. `metadata`: the AWS
and GCE metadata servers that announce preemptions. The runtime itself never imports them.
"""
