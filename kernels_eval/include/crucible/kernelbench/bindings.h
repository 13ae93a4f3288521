#pragma once
// Python bindings for a KernelBench answer's `functions`, without pybind11: what load_inline's generated
// PYBIND11_MODULE does for the signatures answers use, on Python's C API. torch/python.h and pybind11 cost most of an
// extension's build (their templates are instantiated again in every unit, precompiled header or not); this header
// needs only Python.h and ATen. A signature it cannot bind fails to compile, and the build falls back to load_inline's
// own bindings (kernelbench_build.cpp).
//
// Arguments are positional, as pybind11 binds a function given without argument names. Conversions follow
// pybind11's: a tensor argument takes a torch.Tensor; an integer takes what has __index__; a float takes what has
// __float__ or __index__; a bool takes True, False, None and what has __bool__; a sequence argument (std::vector,
// at::IntArrayRef) takes a sequence other than str and bytes; an optional takes None. Results: a tensor, a scalar, None for void,
// a list for std::vector, a tuple for std::tuple and std::pair. C++ exceptions become RuntimeError (MemoryError for
// std::bad_alloc; IndexError, ValueError, TypeError and NotImplementedError for c10's errors of those kinds).
#include <Python.h>
#include <torch/types.h>

#include <cstdint>
#include <limits>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

// Compiled once per PyTorch against its own Python bindings (tensor_glue.cpp), linked into every extension.
extern "C" {
int crucible_tensor_check(PyObject* object);
const void* crucible_tensor_unpack(PyObject* object);  // the at::Tensor a torch.Tensor holds
PyObject* crucible_tensor_wrap(const void* tensor);    // a new reference; None for an undefined tensor
}

namespace crucible_bindings {

// A Python exception is already set: the call returns NULL.
struct PythonError {};

[[noreturn]] inline void type_error(int index, const char* expected) {
  PyErr_Format(PyExc_TypeError, "argument %d: expected %s", index + 1, expected);
  throw PythonError{};
}

template <class T, class = void>
struct From;  // no specialisation: the signature is not bindable here

template <>
struct From<at::Tensor> {
  using type = at::Tensor;
  static type get(PyObject* o, int i) {
    if (!crucible_tensor_check(o)) type_error(i, "a torch.Tensor");
    return *static_cast<const at::Tensor*>(crucible_tensor_unpack(o));
  }
};

template <class T>
struct From<T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>>> {
  using type = T;
  static type get(PyObject* o, int i) {
    if (PyFloat_Check(o) || !PyIndex_Check(o)) type_error(i, "an int");
    const long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) {  // beyond 64 bits
      PyErr_Clear();
      type_error(i, "an int in the parameter's range");
    }
    if (v < static_cast<long long>(std::numeric_limits<T>::min()) ||
        (v > 0 && static_cast<unsigned long long>(v) > static_cast<unsigned long long>(std::numeric_limits<T>::max())))
      type_error(i, "an int in the parameter's range");
    return static_cast<T>(v);
  }
};

template <class T>
struct From<T, std::enable_if_t<std::is_floating_point_v<T>>> {
  using type = T;
  static type get(PyObject* o, int i) {
    const double v = PyFloat_AsDouble(o);
    if (v == -1.0 && PyErr_Occurred()) {
      PyErr_Clear();
      type_error(i, "a float");
    }
    return static_cast<T>(v);
  }
};

template <>
struct From<bool> {
  using type = bool;
  static type get(PyObject* o, int i) {
    if (o == Py_True || o == Py_False || o == Py_None) return o == Py_True;
    if (!Py_TYPE(o)->tp_as_number || !Py_TYPE(o)->tp_as_number->nb_bool) type_error(i, "a bool");
    const int v = PyObject_IsTrue(o);
    if (v < 0) throw PythonError{};
    return v == 1;
  }
};

template <>
struct From<at::Scalar> {
  using type = at::Scalar;
  static type get(PyObject* o, int i) {
    if (PyBool_Check(o)) return at::Scalar(o == Py_True);
    if (PyLong_Check(o)) return at::Scalar(static_cast<int64_t>(From<int64_t>::get(o, i)));
    return at::Scalar(From<double>::get(o, i));
  }
};

template <>
struct From<std::string> {
  using type = std::string;
  static type get(PyObject* o, int i) {
    Py_ssize_t size = 0;
    const char* text = PyUnicode_Check(o) ? PyUnicode_AsUTF8AndSize(o, &size) : nullptr;
    if (!text) {
      PyErr_Clear();
      type_error(i, "a str");
    }
    return std::string(text, static_cast<std::size_t>(size));
  }
};

// A new reference that is released unless handed on.
struct Owned {
  PyObject* o;
  ~Owned() { Py_XDECREF(o); }
  PyObject* release() { return std::exchange(o, nullptr); }
};

template <class T>
struct From<std::vector<T>> {
  using type = std::vector<typename From<T>::type>;
  static type get(PyObject* o, int i) {
    if (!PySequence_Check(o) || PyUnicode_Check(o) || PyBytes_Check(o)) type_error(i, "a sequence");
    Owned items{PySequence_Fast(o, "a sequence")};
    if (!items.o) throw PythonError{};
    type values;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(items.o);
    values.reserve(static_cast<std::size_t>(n));
    for (Py_ssize_t k = 0; k < n; ++k) values.push_back(From<T>::get(PySequence_Fast_GET_ITEM(items.o, k), i));
    return values;
  }
};

template <>
struct From<at::IntArrayRef> : From<std::vector<int64_t>> {};  // the vector outlives the call, and converts

template <class T>
struct From<std::optional<T>> {
  using type = std::optional<typename From<T>::type>;
  static type get(PyObject* o, int i) {
    if (o == Py_None) return std::nullopt;
    return From<T>::get(o, i);
  }
};

// Older PyTorch's c10::optional is a type of its own (newer ones name std::optional).
template <class T>
struct From<c10::optional<T>, std::enable_if_t<!std::is_same_v<c10::optional<T>, std::optional<T>>>> {
  using type = c10::optional<typename From<T>::type>;
  static type get(PyObject* o, int i) {
    if (o == Py_None) return c10::nullopt;
    return From<T>::get(o, i);
  }
};

template <class T>
using from_t = From<std::remove_cv_t<std::remove_reference_t<T>>>;

// ---- results ----

inline PyObject* checked(PyObject* o) {
  if (!o) throw PythonError{};
  return o;
}

template <class T, class = void>
struct To;

template <>
struct To<at::Tensor> {
  static PyObject* make(const at::Tensor& t) { return checked(crucible_tensor_wrap(&t)); }
};

template <class T>
struct To<T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>>> {
  static PyObject* make(T v) { return checked(PyLong_FromLongLong(static_cast<long long>(v))); }
};

template <class T>
struct To<T, std::enable_if_t<std::is_floating_point_v<T>>> {
  static PyObject* make(T v) { return checked(PyFloat_FromDouble(static_cast<double>(v))); }
};

template <>
struct To<bool> {
  static PyObject* make(bool v) { return PyBool_FromLong(v); }
};

template <class T>
struct To<std::vector<T>> {
  static PyObject* make(const std::vector<T>& items) {
    Owned list{checked(PyList_New(static_cast<Py_ssize_t>(items.size())))};
    for (std::size_t k = 0; k < items.size(); ++k)
      PyList_SET_ITEM(list.o, static_cast<Py_ssize_t>(k), To<T>::make(items[k]));
    return list.release();
  }
};

template <class... T>
struct To<std::tuple<T...>> {
  static PyObject* make(const std::tuple<T...>& items) {
    Owned tuple{checked(PyTuple_New(sizeof...(T)))};
    fill(tuple.o, items, std::index_sequence_for<T...>{});
    return tuple.release();
  }
  template <std::size_t... K>
  static void fill(PyObject* tuple, const std::tuple<T...>& items, std::index_sequence<K...>) {
    (PyTuple_SET_ITEM(tuple, K, To<std::decay_t<T>>::make(std::get<K>(items))), ...);
  }
};

template <class A, class B>
struct To<std::pair<A, B>> {
  static PyObject* make(const std::pair<A, B>& p) { return To<std::tuple<A, B>>::make(std::tuple<A, B>(p.first, p.second)); }
};

template <class T>
struct To<std::optional<T>> {
  static PyObject* make(const std::optional<T>& v) {
    if (!v) Py_RETURN_NONE;
    return To<T>::make(*v);
  }
};

// ---- calls ----

template <class F>
struct Signature;
template <class R, class... A>
struct Signature<R (*)(A...)> {
  using result = R;
  static constexpr std::size_t arity = sizeof...(A);
  using arguments = std::tuple<typename from_t<A>::type...>;
  template <std::size_t... K>
  static arguments read(PyObject* const* args, std::index_sequence<K...>) {
    return arguments{from_t<A>::get(args[K], static_cast<int>(K))...};
  }
};
template <class R, class... A>
struct Signature<R (*)(A...) noexcept> : Signature<R (*)(A...)> {};

inline void set_python_error_from(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const PythonError&) {
  } catch (const c10::IndexError& x) {
    PyErr_SetString(PyExc_IndexError, x.what_without_backtrace());
  } catch (const c10::ValueError& x) {
    PyErr_SetString(PyExc_ValueError, x.what_without_backtrace());
  } catch (const c10::TypeError& x) {
    PyErr_SetString(PyExc_TypeError, x.what_without_backtrace());
  } catch (const c10::NotImplementedError& x) {
    PyErr_SetString(PyExc_NotImplementedError, x.what_without_backtrace());
  } catch (const c10::Error& x) {
    PyErr_SetString(PyExc_RuntimeError, x.what_without_backtrace());
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& x) {
    PyErr_SetString(PyExc_RuntimeError, x.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "an unknown C++ exception");
  }
}

// One bound function, as a METH_FASTCALL method.
template <auto F>
PyObject* call(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  using S = Signature<decltype(F)>;
  if (nargs != static_cast<Py_ssize_t>(S::arity)) {
    PyErr_Format(PyExc_TypeError, "expected %zd arguments, got %zd", static_cast<Py_ssize_t>(S::arity), nargs);
    return nullptr;
  }
  try {
    auto values = S::read(args, std::make_index_sequence<S::arity>{});
    if constexpr (std::is_void_v<typename S::result>) {
      std::apply(F, values);  // lvalues: a parameter may be a non-const reference
      Py_RETURN_NONE;
    } else {
      return To<std::decay_t<typename S::result>>::make(std::apply(F, values));
    }
  } catch (...) {
    set_python_error_from(std::current_exception());
    return nullptr;
  }
}

template <auto F>
PyMethodDef method(const char* name) {
  return {name, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&call<F>)), METH_FASTCALL, name};
}

inline PyObject* make_module(PyModuleDef* def) { return PyModule_Create(def); }

}  // namespace crucible_bindings
