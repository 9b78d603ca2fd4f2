"""`spotsafe-run`: torchrun whose exit code tells a preemption from a failure.

    spotsafe-run [torchrun arguments] -m module [module arguments]

It takes torchrun's arguments and runs torchrun's elastic agent, with three differences:

- It exits 75 ("preempted, resume me") when the ranks stopped for a preemption: on a SIGTERM to
  the launcher (torchrun forwards it to the ranks, which make a final save, and then exits 1),
  or when the ranks ended with 75 themselves. A Job's podFailurePolicy can then tell a
  preemption from a failure by the exit code. Any other failure keeps its code: the first rank
  that failed otherwise gives it (see `exit_code`).
- SIGTERM is handled from the start, so a node preempted while its agent is still in the
  rendezvous stops the same way.
- The ranks' own store is rebuilt at each rendezvous round (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
  unless set). torchrun otherwise lets the first round's rank-0 agent host it for good, and an
  agent that joins a later round, or a round whose rank 0 changed, waits for an address that is
  never published.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

from spotsafe.preemption import EXIT_PREEMPTED

log = logging.getLogger("spotsafe.launcher")


def exit_code(exit_codes: list[int]) -> int:
    """The launcher's exit code from its failed ranks' codes, in the order they failed.

    When one rank ends, torchrun stops the others with SIGTERM; those are not causes. A rank
    killed by signal N counts as 128 + N, as a shell reports it.
    """
    causes = [code for code in exit_codes if code not in (EXIT_PREEMPTED, -signal.SIGTERM)]
    if not causes and EXIT_PREEMPTED in exit_codes:
        return EXIT_PREEMPTED
    code = (causes or exit_codes)[0]
    return code if code > 0 else 128 - code


def main(argv: list[str] | None = None) -> int:
    # Until torchrun's agent runs, no rank has started: a SIGTERM means "resume me", nothing more.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(EXIT_PREEMPTED))
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous import RendezvousError
    from torch.distributed.run import parse_args, run

    args = parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(name)s %(levelname)s %(message)s")
    os.environ.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")

    def stop(signum: int, _frame: object) -> None:
        sig = signal.Signals(signum)
        raise SignalException(f"spotsafe-run got {sig.name}", sig)

    signal.signal(signal.SIGTERM, stop)
    try:
        run(args)
    except SignalException as e:
        if e.sigval != signal.SIGTERM:
            log.error("stopped by %s", e.sigval.name)
            return 128 + e.sigval
        log.warning("SIGTERM: the ranks stopped for a preemption; exit %d", EXIT_PREEMPTED)
        return EXIT_PREEMPTED
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
        print(f"error: rendezvous at {args.rdzv_endpoint} failed: {e}{cause}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
