"""The gate's process pool: ``jobs`` processes, this one among them.

Measured on 300 runs of 1,200 steps (docs/performance.md, issue 28), ``-j 2`` used to
take 0.83x to 1.27x of ``-j 1``'s time on 2 cores, for three reasons this pool removes:

- each of the ``jobs`` workers was a fresh ``spawn`` interpreter paying ~0.9 s of CPU
  (imports, the first run's lazy imports) before its first run, while this process,
  with all of it loaded, only waited: now this process judges runs too and ``jobs - 1``
  workers are started, so the first runs are judged at once and one start-up less is
  paid; runs go to the workers once one of them is up (a gate of a few runs is over
  before then, in this process);
- each worker ran polars' thread pool as wide as the machine, so ``jobs`` workers on
  ``jobs`` cores ran ``jobs**2`` threads: the workers are started with one polars
  thread (``POLARS_MAX_THREADS=1``, unless the user set it), the processes being the
  parallelism;
- one future per run: runs now go in chunks (a few per task while many are left, one
  at the end so no worker is left with a long tail).

The pool stays ``spawn``: forking a process that imported polars (three threads at
import, a thread pool once used) can deadlock, which is why a forkserver with the
imports preloaded was not taken. No Run or frame crosses a process boundary: a task
returns its :class:`RunReport` objects (2-7 kB pickled a run).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING

from trainlens.core.errors import TrainlensError

if TYPE_CHECKING:
    from trainlens.gate.discover import Source
    from trainlens.gate.result import RunReport
    from trainlens.gate.runner import GateJob  # (a type only: runner imports this module)

    Judge = Callable[[Source, GateJob], list[RunReport]]

#: runs per task at most (a task's overhead, ~0.3 ms, is then spread over them)
CHUNK_MAX = 8
#: tasks kept queued per worker, so a worker never waits for this process to hand it one
QUEUED_PER_WORKER = 2

#: whether this process judges runs beside its workers (tests turn it off to send every
#: run through a worker)
PARENT_JUDGES = True

_JOB: GateJob | None = None
_WORKER_SCOPE = ExitStack()  # what a worker keeps on until its pool shuts it down


def _init_worker(job: GateJob) -> None:
    from trainlens.checkpoints._discover import shared_listings

    global _JOB
    _JOB = job
    _WORKER_SCOPE.enter_context(shared_listings())


def _work(judge: Judge, chunk: list[tuple[int, Source]]) -> list[tuple[int, list[RunReport]]]:
    assert _JOB is not None, "worker not initialized"
    return [(i, judge(source, _JOB)) for i, source in chunk]


@contextmanager
def _one_polars_thread() -> Iterator[None]:
    """Workers started within get one polars thread (read when polars is imported)."""
    if "POLARS_MAX_THREADS" in os.environ:  # the user's choice stands
        yield
        return
    os.environ["POLARS_MAX_THREADS"] = "1"
    try:
        yield
    finally:
        os.environ.pop("POLARS_MAX_THREADS", None)


def chunk_size(left: int, workers: int) -> int:
    """Runs in the next task: a quarter of each worker's fair share of what is left,
    between 1 and CHUNK_MAX."""
    return max(1, min(CHUNK_MAX, left // (4 * workers)))


def run_parallel(
    sources: Sequence[Source],
    job: GateJob,
    processes: int,
    on_done: Callable[[int, int], None] | None,
    judge: Judge,
) -> list[list[RunReport]]:
    """``judge(source, job)`` for every source in ``processes`` processes (this one and
    ``processes - 1`` workers; ``judge`` a module-level function, sent by name); each
    source's reports at its index."""
    import multiprocessing as mp

    from trainlens.checkpoints._discover import shared_listings

    total = len(sources)
    results: list[list[RunReport]] = [[] for _ in sources]
    helpers = max(1, processes - 1)
    left: deque[tuple[int, Source]] = deque(enumerate(sources))
    queued: set[Future[list[tuple[int, list[RunReport]]]]] = set()
    finished = 0

    def done(i: int, reports: list[RunReport]) -> None:
        nonlocal finished
        results[i] = reports
        finished += 1
        if on_done:
            on_done(finished, total)

    pool = ProcessPoolExecutor(
        max_workers=helpers,
        mp_context=mp.get_context("spawn"),
        initializer=_init_worker,
        initargs=(job,),
    )
    try:
        # one probe per worker starts them all (spawn copies the environment then); runs
        # go to them once the first is up, so no run waits on a worker still starting
        with _one_polars_thread():
            probes = [pool.submit(os.getpid) for _ in range(helpers)]
        with shared_listings():
            while left or queued:
                if any(p.done() for p in probes):
                    while left and len(queued) < QUEUED_PER_WORKER * helpers:
                        k = chunk_size(len(left), processes)
                        chunk = [left.popleft() for _ in range(min(k, len(left)))]
                        queued.add(pool.submit(_work, judge, chunk))
                for fut in [f for f in queued if f.done()]:
                    queued.discard(fut)
                    for i, reports in fut.result():
                        done(i, reports)
                if left and PARENT_JUDGES:  # this process judges a run while they work
                    i, source = left.pop()  # (from the end: the workers take the front)
                    done(i, judge(source, job))
                elif queued:
                    wait(queued, return_when=FIRST_COMPLETED)
                elif left:  # nothing queued yet: the workers are starting
                    wait(probes, return_when=FIRST_COMPLETED)
        for p in probes:
            p.result()  # (a worker that died starting: BrokenProcessPool, below)
    except BrokenProcessPool:
        pool.shutdown(wait=False, cancel_futures=True)
        raise TrainlensError(
            "a gate worker process died abruptly (out of memory, a crash in a native "
            "library, or, when trainlens.gate.gate() is called from a script, a missing "
            "`if __name__ == '__main__':` guard around the call)",
            hint="rerun with --jobs 1 (jobs=1) to see the error in this process",
        ) from None
    except BaseException:
        # Ctrl-C or a bug in a worker: do not wait for the queued sources
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return results
