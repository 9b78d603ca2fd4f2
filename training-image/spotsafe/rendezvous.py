"""A c10d rendezvous store that lives apart from every training node.

    python -m spotsafe.rendezvous --port 29400

torchrun's c10d rendezvous keeps its state in a TCPStore. Left to itself, the agent whose
address matches `--rdzv-endpoint` hosts that store, and the node under it becomes a single
point of failure: when it goes, every other agent loses the rendezvous and fails. This process
hosts the store instead, on capacity that is not preempted, and the agents connect to it as
clients (`--rdzv-conf=is_host=false`). Each run keeps its state under its own `--rdzv-id`, so
one store serves many runs.
"""

from __future__ import annotations

import argparse
import signal
import sys

DEFAULT_PORT = 29400


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m spotsafe.rendezvous", description=__doc__)
    p.add_argument("--host", default="0.0.0.0", help="address to listen on")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="0 picks a free port")
    args = p.parse_args(argv)
    if not 0 <= args.port <= 65535:
        p.error(f"--port must be 0..65535, got {args.port}")
    # The pod's deletion is a normal end; the agents' state goes with the store.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))

    from torch.distributed import TCPStore

    try:
        store = TCPStore(args.host, args.port, is_master=True, wait_for_workers=False)
    except RuntimeError as e:
        print(f"error: cannot serve on {args.host}:{args.port}: {e}", file=sys.stderr)
        return 1
    print(f"rendezvous store listening on {args.host}:{store.port}", flush=True)
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main())
