#include "worker/py/collectives.h"

#include <time.h>

#include <cstdint>
#include <string>

#include "worker/collective_ring.h"

namespace perftracker::worker::py {
namespace {

int64_t WallNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// A str argument as UTF-8; null (with a TypeError set) otherwise.
const char* Utf8(PyObject* o, Py_ssize_t* n) {
  if (!PyUnicode_Check(o)) {
    PyErr_SetString(PyExc_TypeError, "a str is needed");
    return nullptr;
  }
  return PyUnicode_AsUTF8AndSize(o, n);
}

}  // namespace

PyObject* CollectiveEnter(PyObject*, PyObject* args) {
  const char *group, *desc, *op, *backend, *dtype, *file, *function;
  Py_ssize_t ng, nd, no, nb, nt, nf, nfn;
  long long seq = -1;
  int line = 0;
  PyObject* sizes = nullptr;
  if (!PyArg_ParseTuple(args, "s#s#Ls#s#Os#s#is#", &group, &ng, &desc, &nd, &seq, &op, &no,
                        &backend, &nb, &sizes, &dtype, &nt, &file, &nf, &line, &function, &nfn))
    return nullptr;
  int64_t dims[8];
  size_t n = 0;
  bool tensor = false;
  if (sizes != Py_None) {
    PyObject* seq_obj = PySequence_Fast(sizes, "sizes must be a sequence of ints or None");
    if (seq_obj == nullptr) return nullptr;
    tensor = true;
    const Py_ssize_t len = PySequence_Fast_GET_SIZE(seq_obj);
    for (Py_ssize_t i = 0; i < len && n < 8; ++i) {
      const long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq_obj, i));
      if (v == -1 && PyErr_Occurred()) {
        Py_DECREF(seq_obj);
        return nullptr;
      }
      dims[n++] = v;
    }
    Py_DECREF(seq_obj);
  }
  CollectiveEntry e;
  e.group = {group, static_cast<size_t>(ng)};
  e.group_desc = {desc, static_cast<size_t>(nd)};
  e.seq = seq;
  e.op = {op, static_cast<size_t>(no)};
  e.backend = {backend, static_cast<size_t>(nb)};
  e.sizes = tensor ? dims : nullptr;
  e.dims = n;
  e.dtype = {dtype, static_cast<size_t>(nt)};
  e.file = {file, static_cast<size_t>(nf)};
  e.line = line;
  e.function = {function, static_cast<size_t>(nfn)};
  return PyLong_FromUnsignedLongLong(collective_ring::Entered(e, WallNs()));
}

PyObject* CollectiveExit(PyObject*, PyObject* args) {
  unsigned long long ticket = 0;
  int completed = 0;
  if (!PyArg_ParseTuple(args, "Kp", &ticket, &completed)) return nullptr;
  collective_ring::Returned(ticket, completed != 0);
  Py_RETURN_NONE;
}

PyObject* CollectiveDump(PyObject*, PyObject* path) {
  Py_ssize_t n = 0;
  const char* p = Utf8(path, &n);
  if (p == nullptr) return nullptr;
  const std::string target(p, static_cast<size_t>(n));
  PyThreadState* saved = PyEval_SaveThread();  // a file write: others may run meanwhile
  const Status st = collective_ring::WriteDump(target);
  PyEval_RestoreThread(saved);
  if (!st.ok()) {
    PyErr_SetString(PyExc_OSError, st.message().c_str());
    return nullptr;
  }
  Py_RETURN_NONE;
}

PyObject* CollectiveCrashPath(PyObject*, PyObject* path) {
  Py_ssize_t n = 0;
  const char* p = Utf8(path, &n);
  if (p == nullptr) return nullptr;
  if (Status st = collective_ring::SetCrashPath(std::string(p, static_cast<size_t>(n))); !st.ok()) {
    PyErr_SetString(PyExc_OSError, st.message().c_str());
    return nullptr;
  }
  Py_RETURN_NONE;
}

}  // namespace perftracker::worker::py
