"""`spotsafe-run`: torchrun whose exit code tells a preemption from a failure.

    spotsafe-run [torchrun arguments] -m module [module arguments]

It takes torchrun's arguments and runs torchrun's elastic agent, with these differences:

- It exits 75 ("preempted, resume me") when the ranks stopped for a preemption: on a SIGTERM to
  the launcher (torchrun forwards it to the ranks, which make a final save, and then exits 1)
  once every rank ended with 75 (or finished, or died of the SIGTERM before it trained), or
  when the ranks ended with 75 themselves. A Job's podFailurePolicy can then tell a
  preemption from a failure by the exit code. Any other failure keeps its code, a rank that
  crashed while the others stopped for the SIGTERM included: the first rank that failed
  otherwise gives it (see `exit_code`).
- SIGTERM is handled from the start, so a node preempted while its agent is still in the
  rendezvous stops the same way.
- A c10d rendezvous store hosted elsewhere (`is_host=false`) is waited for first, for up to
  the rendezvous's join_timeout, while a SIGTERM still stops the launcher at once (torchrun's
  own connect holds signals until it gives up). A store that never answers is one line on
  stderr and exit 1: it is missing, or the endpoint is wrong.
- It exits 75 too when the rendezvous store is lost after the ranks have run: torchrun then
  stops the ranks with SIGTERM (they make a final save; how they ended counts as above) and
  fails; and when, after the ranks ran, the gang does not re-form within join_timeout (a node
  lost and not replaced), with one line on stderr that names the nodes that left (their
  address and agent pid). Any other rendezvous error (a rendezvous closed by a node that
  failed for good, a gang that never formed) is one line on stderr and exit 1.
- The ranks' own store is rebuilt at each rendezvous round (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
  unless set). torchrun otherwise keeps it in the first round's rank-0 agent, and a replacement
  node that joins a later round times out waiting for keys that agent never publishes again.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Mapping

from spotsafe.preemption import EXIT_PREEMPTED

log = logging.getLogger("spotsafe.launcher")

# Set by spotsafe-run for the ranks it starts: the launcher that passes exit 75 on.
LAUNCHER_ENV = "SPOTSAFE_LAUNCHER"


def warn_if_exit_code_lost(environ: Mapping[str, str] = os.environ) -> bool:
    """Warn when torchrun's agent (not spotsafe-run) started this rank: it
    exits 1 when the ranks stop for a preemption, and the Job counts a failure. True if so."""
    if "TORCHELASTIC_RUN_ID" not in environ or LAUNCHER_ENV in environ:
        return False
    log.warning(
        "this rank runs under torchrun, which exits 1 when the ranks stop for a preemption "
        "(exit 75), so the Job counts each preemption as a failure: launch with spotsafe-run, "
        "which takes torchrun's arguments"
    )
    return True


def exit_code(exit_codes: list[int], sigterm: bool = False) -> int:
    """The launcher's exit code from its failed ranks' codes, in the order they failed.

    When one rank ends, torchrun stops the others with SIGTERM; those are not causes. A rank
    killed by signal N counts as 128 + N, as a shell reports it.

    After a SIGTERM to the launcher, which torchrun passed on (`sigterm`), the codes are every
    rank's: 75 only when each ended with 75 (its final save made), finished (0) or died of the
    SIGTERM itself (a rank still starting, with nothing trained to save); 0 when all finished.
    Any other code is a crash, not a preemption: exit 1 of a rank that raised while stopping,
    137 of one torchrun killed at the end of its shutdown timeout (its final save, or its exit
    after it, outlasted the timeout: the launcher cannot tell which).
    """
    stops = {EXIT_PREEMPTED, -signal.SIGTERM} | ({0} if sigterm else set())
    causes = [code for code in exit_codes if code not in stops]
    if not causes and (sigterm or EXIT_PREEMPTED in exit_codes):
        return 0 if exit_codes and not any(exit_codes) else EXIT_PREEMPTED
    code = (causes or exit_codes)[0]
    return code if code > 0 else 128 - code


def wait_for_store(host: str, port: int, timeout_s: float) -> bool:
    """Whether the store at host:port accepts a connection within timeout_s."""
    deadline = time.monotonic() + timeout_s
    waiting = False
    while True:
        try:
            socket.create_connection((host, port), timeout=1).close()
            return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
        if not waiting:
            log.warning("no rendezvous store at %s:%d yet; waiting %.0f s", host, port, timeout_s)
            waiting = True
        time.sleep(1)


def _external_store(args) -> tuple[str, int, int] | None:
    """(host, port, join timeout) of a c10d store this agent does not host, else None."""
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

    if args.standalone or args.rdzv_backend != "c10d":
        return None
    conf = dict(item.split("=", 1) for item in args.rdzv_conf.split(",") if "=" in item)
    params = RendezvousParameters(args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id, 1, 1, **conf)
    if params.get_as_bool("is_host") is not False:
        return None
    host, port = parse_rendezvous_endpoint(args.rdzv_endpoint, default_port=29400)
    return host, port, params.get_as_int("join_timeout", 600)


# The c10d rendezvous, created by _Gang so that it knows its handler.
GANG_BACKEND = "spotsafe-c10d"


class _Gang:
    """What this agent knows of its gang: whether its ranks have started (a torchelastic metric
    handler), which nodes the last gang that ran had (the c10d rendezvous it creates) and how
    this node's ranks ended (the processes its agent starts)."""

    def __init__(self, start_processes) -> None:
        self.seen = False
        self.handler = None
        self.nodes: list = []
        self._start_processes = start_processes
        self.ranks = None

    def start_processes(self, *args, **kwargs):
        self.ranks = self._start_processes(*args, **kwargs)
        return self.ranks

    def ended(self) -> list[tuple[int, int, int]]:
        """(local rank, pid, exit code) of the last round's ranks, once torchrun closed them; a
        rank it could not reap after its SIGKILL counts as killed by it."""
        handlers = getattr(self.ranks, "subprocess_handlers", {})  # torch 2.13, binaries
        return [
            (rank, h.proc.pid, -signal.SIGKILL if h.proc.poll() is None else h.proc.returncode)
            for rank, h in sorted(handlers.items())
        ]

    def create_handler(self, params):
        from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import create_backend
        from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler

        params.backend = "c10d"  # the backend it is: GANG_BACKEND only routed it here
        backend, store = create_backend(params)
        self.handler = create_handler(store, backend, params)
        return self.handler

    def emit(self, metric) -> None:
        if metric.name.endswith("._start_workers.success"):
            self.seen = True
            if self.handler is not None:
                # torch keeps the round's participants in the handler's state only (torch 2.13).
                self.nodes = list(self.handler._state_holder.state.participants)

    def missing(self) -> str:
        """The nodes of the last gang that ran whose heartbeats stopped, as `addr (agent pid N)`."""
        if self.handler is None:
            return "unknown"
        # This node has left the rendezvous by now, having timed out.
        alive = {self.handler._this_node, *self.handler._state_holder.state.last_heartbeats}
        gone = [node for node in self.nodes if node not in alive]
        return ", ".join(f"{node.addr} (agent pid {node.pid})" for node in gone) or "unknown"


def _stopped(gang: _Gang, why: str) -> int:
    """The exit code once torchrun has stopped this node's ranks with SIGTERM for `why`, from
    how each ended (see exit_code); a rank that failed meanwhile is named on stderr."""
    ended = gang.ended()
    code = exit_code([c for _, _, c in ended], sigterm=True)
    if code == EXIT_PREEMPTED:
        log.warning("%s: stopped for a preemption; exit %d", why, EXIT_PREEMPTED)
    elif code == 0:
        log.warning("%s after the ranks finished; exit 0", why)
    else:
        rank, pid = next((r, p) for r, p, c in ended if (c if c > 0 else 128 - c) == code)
        print(
            f"{why}: local rank {rank} (pid {pid}) failed (exit {code}) while the ranks stopped "
            f"for a preemption: exit {code}, not {EXIT_PREEMPTED}",
            file=sys.stderr,
        )
    return code


def main(argv: list[str] | None = None) -> int:
    # Until torchrun's agent runs, no rank has started: a SIGTERM means "resume me", nothing
    # more. SystemExit, which no library's `except Exception` (logging's, say) can swallow.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(EXIT_PREEMPTED))
    from torch.distributed.elastic import metrics
    from torch.distributed.elastic.agent.server import local_elastic_agent
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous import (
        RendezvousConnectionError,
        RendezvousError,
        RendezvousTimeoutError,
        rendezvous_handler_registry,
    )
    from torch.distributed.run import parse_args, run

    args = parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(name)s %(levelname)s %(message)s")
    os.environ.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    os.environ[LAUNCHER_ENV] = "spotsafe-run"

    store = _external_store(args)
    if store and not wait_for_store(*store):
        host, port, timeout_s = store
        print(f"error: no rendezvous store at {host}:{port} in {timeout_s} s", file=sys.stderr)
        return 1

    def stop(signum: int, _frame: object) -> None:
        sig = signal.Signals(signum)
        raise SignalException(f"spotsafe-run got {sig.name}", sig)

    # From here torchrun's agent turns a SIGTERM into a stop of its ranks.
    signal.signal(signal.SIGTERM, stop)
    gang = _Gang(local_elastic_agent.start_processes)
    local_elastic_agent.start_processes = gang.start_processes  # the agent's own lookup
    metrics.configure(gang, group="torchelastic")
    if args.rdzv_backend == "c10d" and not args.standalone:
        rendezvous_handler_registry.register(GANG_BACKEND, gang.create_handler)
        args.rdzv_backend = GANG_BACKEND
    try:
        run(args)
    except SignalException as e:
        if e.sigval != signal.SIGTERM:
            log.error("stopped by %s", e.sigval.name)
            return 128 + e.sigval
        return _stopped(gang, "SIGTERM")
    except ChildFailedError as e:
        failed = sorted(e.failures.values(), key=lambda f: f.timestamp)
        code = exit_code([f.exitcode for f in failed])
        if code == EXIT_PREEMPTED:
            log.warning("the ranks stopped for a preemption; exit %d", EXIT_PREEMPTED)
        else:
            print(e, file=sys.stderr)
        return code
    except RendezvousError as e:
        # The cause (a socket timeout, say) says why; its C++ stack that follows does not.
        cause = f" ({str(e.__cause__).splitlines()[0]})" if e.__cause__ else ""
        if gang.seen and isinstance(e, RendezvousConnectionError):
            return _stopped(gang, f"rendezvous store lost{cause}")
        if gang.seen and isinstance(e, RendezvousTimeoutError):
            # A node left (lost, not replaced) and the gang did not re-form: nothing failed,
            # the run's newest checkpoint stands, and the GPUs are not held any longer.
            print(
                f"rendezvous at {args.rdzv_endpoint}: node(s) {gang.missing()} left and the "
                f"gang of at least {args.nnodes.split(':')[0]} node(s) did not re-form within "
                f"the rendezvous's join_timeout; stopping so the run is requeued "
                f"(exit {EXIT_PREEMPTED})",
                file=sys.stderr,
            )
            return EXIT_PREEMPTED
        print(f"error: rendezvous at {args.rdzv_endpoint} failed: {e}{cause}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
