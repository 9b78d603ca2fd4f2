"""The baseline arm's trainer: spot training the way a team runs it without the platform.

    python -m spotctl.drill.plain_train --steps 100 --checkpoint-uri s3://bucket/run

The example trainer's model, data and step (spotsafe.examples.train), checkpointed as a training
script usually does it: every K steps the loop stops, `torch.save`s the state and uploads it over
one object, `latest.pt`; at start it loads that object if there is one. No manifest, no checksum
verified on restore, no fencing, no exact resume of the random generators, and no termination
notice is watched: a SIGTERM ends the process at once, and a reclaimed node ends it with the
node. It keeps the runtime's goodput ledger and step metrics, so the drill measures both arms
with one instrument. Its last stdout line is one JSON object: final_step, resumed_from, goodput.
"""

from __future__ import annotations

import io
import json
import sys
from urllib.parse import urlparse

import boto3
import torch
from botocore.exceptions import ClientError
from spotsafe import goodput, metrics
from spotsafe.examples.train import make_state, parse_args, train_step

OBJECT = "latest.pt"


def main(argv: list[str] | None = None) -> int:
    cfg, args = parse_args(argv)
    if args.metrics_port:
        from prometheus_client import start_http_server

        start_http_server(args.metrics_port)
    torch.set_num_threads(1)
    model, state = make_state(cfg)
    ledger = goodput.Ledger()
    ledger.start()  # as spotsafe.Run does, once the model is built
    uri = urlparse(cfg.checkpoint_uri)
    s3, bucket, key = boto3.client("s3"), uri.netloc, f"{uri.path.strip('/')}/{OBJECT}"
    resumed_from = restore(s3, bucket, key, state)
    metrics.resumed_from_step.set(-1 if resumed_from is None else resumed_from)
    ledger.charge(goodput.RESTORE)
    for step in range((resumed_from or 0) + 1, cfg.steps + 1):
        train_step(cfg, model, state)
        ledger.step(step)
        metrics.training_step.set(step)
        if step % cfg.every_steps == 0 or step == cfg.steps:
            save(s3, bucket, key, step, state)
            ledger.charge(goodput.BLOCKING_SAVES)
    result = {"final_step": cfg.steps, "resumed_from": resumed_from, "goodput": ledger.to_json()}
    print(json.dumps(result), flush=True)
    return 0


def restore(s3, bucket: str, key: str, state: dict) -> int | None:
    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as e:
        if e.response["Error"]["Code"] in ("NoSuchKey", "404"):
            return None
        raise
    saved = torch.load(io.BytesIO(body), weights_only=True)
    for name, entry in state.items():
        entry.load_state_dict(saved[name])
    return saved["step"]


def save(s3, bucket: str, key: str, step: int, state: dict) -> None:
    buffer = io.BytesIO()
    torch.save({"step": step, **{name: e.state_dict() for name, e in state.items()}}, buffer)
    s3.put_object(Bucket=bucket, Key=key, Body=buffer.getvalue())


if __name__ == "__main__":
    sys.exit(main())
