// The pieces of the pybind11 module `paceline._paceline`: one bind_<folder>() per C++ folder it
// exposes (module.cc only calls them), and the two conversions they share.
#ifndef PACELINE_PYTHON_BINDINGS_H_
#define PACELINE_PYTHON_BINDINGS_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <atomic>
#include <chrono>
#include <future>
#include <vector>

#include "base/json.h"

namespace paceline::python {

namespace py = pybind11;

void bind_simulator(py::module_& m);
void bind_search(py::module_& m);
void bind_timeline(py::module_& m);
void bind_listing(py::module_& m);

// A Json value as Python objects (dict, list, str, float/int, bool, None) — read back by the
// json module from its exact text, so keys keep their order and numbers their value.
inline py::object to_python(const Json& json) {
  return py::module_::import("json").attr("loads")(json.dump(-1));
}

// A read-only NumPy view of `values` that keeps `owner` (the Python object holding them) alive
// for as long as the array, or any view of it, lives.
template <typename T>
py::array_t<T> view(const std::vector<T>& values, py::handle owner) {
  py::array_t<T> array({static_cast<py::ssize_t>(values.size())},
                       {static_cast<py::ssize_t>(sizeof(T))}, values.data(), owner);
  py::detail::array_proxy(array.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return array;
}

// Runs `work(stop)` without the GIL. On Python's main thread, the only one its signals reach, the
// work runs on another thread while this one looks every 50 ms for a signal Python has caught
// (Ctrl-C, a notebook's interrupt): on one it sets `stop`, waits for the work to give up, and
// raises the signal's exception (KeyboardInterrupt). Elsewhere the work runs here: a thread that
// took the GIL back while the interpreter shuts down would be ended inside C++ frames. Called
// with the GIL.
template <typename Work>
auto run_interruptible(Work&& work) {
  std::atomic<bool> stop{false};
  const py::module_ threading = py::module_::import("threading");
  if (!threading.attr("current_thread")().is(threading.attr("main_thread")())) {
    py::gil_scoped_release release;
    return work(stop);
  }
  auto done = std::async(std::launch::async, [&] { return work(stop); });
  py::gil_scoped_release release;
  while (done.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
    py::gil_scoped_acquire acquire;
    if (PyErr_CheckSignals() != 0) {
      stop = true;
      {
        py::gil_scoped_release waiting;
        done.wait();
      }
      throw py::error_already_set();
    }
  }
  return done.get();
}

}  // namespace paceline::python

#endif  // PACELINE_PYTHON_BINDINGS_H_
