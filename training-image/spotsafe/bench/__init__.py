"""Benchmark: spotsafe's saves and restores beside plain boto3, on a local S3-API server.

    python -m spotsafe.bench --json          # the full sweep: run by hand, under 10 minutes
    python -m spotsafe.bench --json --fast   # every figure on small states, for tests

Every figure is measured in the same run as its baseline, repetitions interleaved, and reported
as the median with its spread (min-max):

- sweep, one entry per state size (about 100 MB, 500 MB, 2 GB of MLP parameters plus AdamW
  state): save_s (save() until durable) beside baseline_upload_s (torch.save into memory, then
  boto3 upload_fileobj); restore_s (restore(), verified) beside baseline_restore_s (boto3
  download_fileobj plus torch.load); blocked_s (the training loop's wait in save()) beside
  memcpy_s (one copy of the same tensors into buffers allocated beforehand). The slope of each
  against the state size says how it grows. Entries of 500 MB and more are measured on the
  local filesystem store instead (local_sweep), beside a plain write of the same torch.save
  bytes, synced, and a plain read plus torch.load: the local S3 server is a Python process that
  moves about 40 MB/s on a busy 2-core machine (every byte through its HTTP server, an MD5 for
  the ETag, a spool file and a join of the parts; 500 MB took 17 s to upload), so at those
  sizes each figure and its baseline would measure the server alike (a benchmark of 2 GB
  through it ran past half an hour). The filesystem store runs the same save (snapshot,
  serialisation into parts, CRC32C, create-only commit, verified restore) with only the disk
  behind it, so its ratios are the pipeline's, and its slopes are how the pipeline grows; the
  S3 entries measure what the S3 path adds. A local_sweep entry is not a bucket's cost: the
  planner reads sweep.
- sharded: two gloo ranks, a row-sharded state: blocked_s and memcpy_s per rank; save_s beside
  baseline_upload_s, plain boto3 uploads of the same shard files from both ranks at once, taken
  in turns with the saves.
- step_overhead_pct (a save every --save-every-s) and step_overhead_pct_60s: the training time
  a save costs (steps run while it is in flight, against the median step just before it) over
  the interval, with the example trainer's --size state.
- peak_extra_bytes beside baseline_peak_extra_bytes: the rise of peak resident memory over three
  saves of the first sweep state, each measured in a fresh process.

With ``--device cuda`` the sweep's and the trainer's states live on the GPU (staging is then a
copy into pinned host memory, as is memcpy_s); the sharded and memory figures stay on CPU. The
top-level save/restore/blocked figures are the first sweep entry's. The local server is moto
without two costs that are moto's alone (see spotsafe.local.moto_s3); it runs at a lower CPU
priority (nice 10): it stands in for remote storage, whose CPU is not the training node's, yet
must not starve on a busy machine.
"""
