// perftracker._worker's bindings of the worker's ring of collectives (worker/collective_ring.h):
// the torch.distributed wrappers (python/perftracker/patches.py) record each collective they
// pass on, and the collector dumps the ring at exit, on a hang and on a fatal signal.
#ifndef PERFTRACKER_WORKER_PY_COLLECTIVES_H_
#define PERFTRACKER_WORKER_PY_COLLECTIVES_H_

#define PY_SSIZE_T_CLEAN  // "#" formats take Py_ssize_t lengths
#include <Python.h>

namespace perftracker::worker::py {

// collective_enter(group, desc, seq, op, backend, sizes, dtype, file, line, function) -> ticket
PyObject* CollectiveEnter(PyObject* self, PyObject* args);
// collective_exit(ticket, completed)
PyObject* CollectiveExit(PyObject* self, PyObject* args);
// collective_dump(path): the ring as a Flight Recorder JSON dump (OSError on failure)
PyObject* CollectiveDump(PyObject* self, PyObject* path);
// collective_crash_path(path): where a fatal signal writes the ring ("" : nowhere)
PyObject* CollectiveCrashPath(PyObject* self, PyObject* path);

}  // namespace perftracker::worker::py

#endif  // PERFTRACKER_WORKER_PY_COLLECTIVES_H_
