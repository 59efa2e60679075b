// The pieces of the pybind11 module `paceline._paceline`: one bind_<folder>() per C++ folder it
// exposes (module.cc only calls them), and the two conversions they share.
#ifndef PACELINE_PYTHON_BINDINGS_H_
#define PACELINE_PYTHON_BINDINGS_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

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

}  // namespace paceline::python

#endif  // PACELINE_PYTHON_BINDINGS_H_
