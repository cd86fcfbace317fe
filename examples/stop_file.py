"""How the example jobs (examples/train_ddp.py, examples/jobs/) end.

--stop-file: a test ends a job once what it waits for was diagnosed (tests/ptest.py
StopWhenDiagnosed makes the file), instead of running out the margin of steps a slow machine
needs. Every rank must leave its loop at the same step, or the ranks' collectives would no longer
match: the process group's store carries the end.

end_process: once a job's work is done, its exit handlers run and the process ends without the
interpreter's teardown of torch's modules.
"""
import os
import sys
import threading

# --stop-file: rank 0 looks for the file at every multiple of this many steps.
STOP_CHECK_STEPS = 4


class StopFile:
    """--stop-file: every rank leaves the loop at the same step once the file exists (a test
    ends a job when what it waits for was diagnosed, instead of running out a margin of steps).
    Rank 0 looks at steps 0, 4, 8, ... and on finding the file at step S writes "end at S+4"
    to the process group's store; the others read it half way, at step S+2. DDP's all-reduce
    keeps the ranks within a step of each other, so a rank at step S+2 knows rank 0 passed step
    S, and a rank at S-2 that rank 0 had not reached S: every rank reads the same end, in time.
    (Only for jobs whose ranks wait for each other every step: a gradient all-reduce, a
    pipeline's sends and receives; ends_at is asked once a step, steps counted from 0.)"""

    def __init__(self, path, rank):
        import torch.distributed as dist
        self.path, self.rank, self.end = path, rank, None
        self.store = dist.distributed_c10d._get_default_store()

    def ends_at(self, step):
        if self.end is None:
            phase = step % STOP_CHECK_STEPS
            # A counter (add), not set/check: torch 1.13's PrefixStore has no check(); adding 0
            # reads it, 0 while rank 0 has not set it.
            if self.rank == 0 and phase == 0 and os.path.exists(self.path):
                self.end = step + STOP_CHECK_STEPS
                self.store.add("perftracker_example_stop_at", self.end)
            elif self.rank != 0 and phase == STOP_CHECK_STEPS // 2:
                self.end = self.store.add("perftracker_example_stop_at", 0) or None
        return self.end is not None and step >= self.end


def end_process(code=0):
    """Ends the process with CODE once the job's threads and exit handlers (atexit: perftracker's
    collector, multiprocessing's reaping of DataLoader workers) have run, skipping what follows
    them: the interpreter's teardown of torch's modules, 0.5-1.5 s of CPU a process on torch
    2.13 (here, 2 cores: 1.6-3.2 s between a 4-rank job's last exit handler and its ranks' end,
    a tenth of a fault test's job; in CI, test_os_causes 230 s instead of 259, each job-shape
    test 4-10 s less, the tests 115 s less in all). Nothing of the jobs' is left to that
    teardown. A job that must exit the ordinary way (tests/test_worker_detector.py's exit inside
    a window) does not call this."""
    for t in threading.enumerate():
        if t is not threading.main_thread() and not t.daemon:
            t.join()
    import atexit
    atexit._run_exitfuncs()  # noqa: SLF001 (CPython's own: what Py_Finalize runs first)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
