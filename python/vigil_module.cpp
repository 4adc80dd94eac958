// vigil._vigil: the Python binding of the engine (SPEC §8, docs/python.md).
//
// One engine implementation: this file only converts. Tensors are read in
// place: objects with the buffer protocol (numpy arrays, memoryviews) through
// their buffer, everything else with `__dlpack__` (torch.Tensor, and any
// DLPack producer) through its DLManagedTensor; neither copies the data, so
// the module links no libtorch. The GIL is released while the engine
// evaluates and re-taken for action callbacks and recorders; a Python
// exception raised by a callback is held until observe() has finished (the
// engine's state is then complete and consistent) and raised from observe().
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <map>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "vigil/engine.hpp"
#include "vigil/program.hpp"
#include "vigil/tensor.hpp"
#include "vigil/trace.hpp"

namespace py = pybind11;

namespace {

// --- DLPack ------------------------------------------------------------------
// The DLPack ABI (dlpack.h v0.6-0.8, what torch 1.13 and numpy 1.24 export),
// declared here so the module needs no tensor library's headers. Only the
// fields read are used; the layout is the stable C ABI of the standard.
struct DLDevice {
  std::int32_t device_type;  // 1 = CPU
  std::int32_t device_id;
};
struct DLDataType {
  std::uint8_t code;  // 0 int, 1 uint, 2 float, 4 bfloat
  std::uint8_t bits;
  std::uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  std::int32_t ndim;
  DLDataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;  // in elements; null: compact row-major
  std::uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor*);
};
constexpr std::int32_t kDLCPU = 1;

// --- Python-side values ------------------------------------------------------

py::object value_to_py(const vigil::Value& v) {
  if (const double* d = std::get_if<double>(&v)) return py::float_(*d);
  if (const bool* b = std::get_if<bool>(&v)) return py::bool_(*b);
  return py::str(std::get<std::string>(v));
}

vigil::Value py_to_value(const std::string& key, py::handle h) {
  if (py::isinstance<py::bool_>(h)) return h.cast<bool>();
  if (py::isinstance<py::str>(h)) return h.cast<std::string>();
  if (PyNumber_Check(h.ptr())) {
    const double d = PyFloat_AsDouble(h.ptr());
    if (d == -1.0 && PyErr_Occurred()) throw py::error_already_set();
    return d;
  }
  throw py::type_error(fmt::format("param '{}' must be a number, str or bool, not {}", key,
                                   std::string(py::str(h.get_type().attr("__name__")))));
}

std::map<std::string, vigil::Value> params_from(const py::object& params) {
  std::map<std::string, vigil::Value> out;
  if (params.is_none()) return out;
  if (!py::isinstance<py::dict>(params)) throw py::type_error("params must be a dict of name -> value");
  for (auto item : params.cast<py::dict>()) {
    if (!py::isinstance<py::str>(item.first)) throw py::type_error("param names must be str");
    auto key = item.first.cast<std::string>();
    out[key] = py_to_value(key, item.second);
  }
  return out;
}

struct ActionObj {
  vigil::Action action;
  py::dict args() const {
    py::dict d;
    for (const auto& [k, v] : action.args) d[py::str(k)] = value_to_py(v);
    return d;
  }
};

// A firing copied out of the engine (the engine's own is valid only until the
// next observe). `source` and `generation` let Engine.explain check that the
// engine's firing is still the one this object was made from.
struct FiringObj {
  std::string rule;
  std::int64_t step = 0;
  std::string mode;
  double time = std::numeric_limits<double>::quiet_NaN();
  std::string severity;
  vigil::Labels labels;
  std::optional<double> value;
  std::vector<vigil::Action> actions;
  std::int64_t pending_since = 0;
  int escalation = 0;
  const void* engine = nullptr;
  std::uint64_t generation = 0;
  const vigil::Firing* source = nullptr;

  std::string key() const { return vigil::format_series_key(rule, labels); }
};

FiringObj copy_firing(const vigil::Firing& f, const void* engine, std::uint64_t generation) {
  FiringObj o;
  o.rule = f.rule_name();
  o.step = f.step;
  o.mode = std::string(f.mode);
  o.time = f.time;
  o.severity = std::string(vigil::to_string(f.severity));
  if (f.labels) o.labels = *f.labels;
  o.value = f.value;
  if (f.actions) o.actions = *f.actions;
  o.pending_since = f.pending_since;
  o.escalation = f.escalation;
  o.engine = engine;
  o.generation = generation;
  o.source = &f;
  return o;
}

py::dict labels_dict(const vigil::Labels& labels) {
  py::dict d;
  for (const auto& [k, v] : labels) d[py::str(k)] = py::str(v);
  return d;
}

py::object optional_float(double v) {
  if (std::isnan(v)) return py::none();
  return py::float_(v);
}

// --- compile -----------------------------------------------------------------

struct ProgramObj {
  vigil::Program program;
  std::vector<std::string> warnings;  // rendered
};

py::list diagnostics_list(const vigil::CompileResult& r) {
  py::list out;
  for (const auto& d : r.diagnostics) {
    py::dict x;
    // A diagnostic without source text (an unreadable rule file) has no file
    // id (~0u): no position either.
    const bool has_file = d.file < r.sources.size();
    const auto lc = has_file ? r.sources.line_col(d.file, d.range.begin) : vigil::LineCol{0, 0};
    x["level"] = d.level == vigil::DiagLevel::error     ? "error"
                 : d.level == vigil::DiagLevel::warning ? "warning"
                                                        : "note";
    x["code"] = d.code;
    x["message"] = d.message;
    x["file"] = has_file ? r.sources[d.file].name : std::string();
    x["line"] = lc.line;
    x["col"] = lc.col;
    x["suggestion"] = d.suggestion;
    x["text"] = vigil::format_diagnostic(d, r.sources);
    out.append(std::move(x));
  }
  return out;
}

py::object g_compile_error;  // vigil.CompileError (set at import)

ProgramObj finish_compile(const vigil::CompileResult& r) {
  if (!r.ok()) {
    py::object exc = g_compile_error(py::str(r.format_diagnostics()));
    exc.attr("diagnostics") = diagnostics_list(r);
    PyErr_SetObject(g_compile_error.ptr(), exc.ptr());
    throw py::error_already_set();
  }
  ProgramObj p{*r.program, {}};
  for (const auto& d : r.diagnostics) p.warnings.push_back(vigil::format_diagnostic(d, r.sources));
  return p;
}

vigil::CompileOptions compile_options(const py::object& params, const py::object& aliases) {
  vigil::CompileOptions o;
  o.params = params_from(params);
  if (!aliases.is_none()) {
    if (!py::isinstance<py::dict>(aliases))
      throw py::type_error("aliases must be a dict of trace name -> rule name");
    for (auto item : aliases.cast<py::dict>())
      o.aliases.emplace_back(py::str(item.first).cast<std::string>(),
                             py::str(item.second).cast<std::string>());
  }
  return o;
}

std::string fspath(py::handle h) {
  py::object p = py::module_::import("os").attr("fspath")(h);
  if (!py::isinstance<py::str>(p)) throw py::type_error("rule file paths must be str or os.PathLike");
  return p.cast<std::string>();
}

// --- tensors -----------------------------------------------------------------

// What keeps one tensor's memory and metadata alive while the engine reads it.
struct HeldTensor {
  std::string key;
  vigil::TensorId id = 0;
  py::object owner;                       // the capsule or the object itself
  std::unique_ptr<py::buffer_info> buffer;
  std::vector<std::int64_t> shape, strides;
  vigil::TensorView view;
  vigil::StatMask due = ~vigil::StatMask{0};
};

std::string type_name(py::handle h) { return py::str(h.get_type().attr("__name__")); }

[[noreturn]] void tensor_error(const std::string& key, const std::string& what) {
  throw py::type_error(fmt::format("observe: tensor '{}': {}", key, what));
}

bool dtype_from_format(std::string_view f, vigil::DType& out) {
  if (!f.empty() && (f[0] == '@' || f[0] == '=' || f[0] == '<')) f.remove_prefix(1);
  if (f == "f") out = vigil::DType::float32;
  else if (f == "d") out = vigil::DType::float64;
  else if (f == "e") out = vigil::DType::float16;
  else return false;
  return true;
}

bool g_noted_device_copy = false;

// Fills `h` from `obj` without copying its data (a tensor on another device
// is copied to the CPU, with a one-time warning).
void hold_tensor(HeldTensor& h, py::handle obj, bool copied = false) {
  if (PyObject_CheckBuffer(obj.ptr())) {
    py::buffer b = py::reinterpret_borrow<py::buffer>(obj);
    h.buffer = std::make_unique<py::buffer_info>(b.request());
    const auto& info = *h.buffer;
    if (!dtype_from_format(info.format, h.view.dtype))
      tensor_error(h.key, fmt::format("unsupported element format '{}' (vigil reads float32, "
                                      "float64, float16 and bfloat16)", info.format));
    for (py::ssize_t d = 0; d < info.ndim; ++d) {
      if (info.strides[d] % info.itemsize != 0)
        tensor_error(h.key, "strides that are not a multiple of the element size");
      h.shape.push_back(info.shape[d]);
      h.strides.push_back(info.strides[d] / info.itemsize);
    }
    h.view.data = info.ptr;
    h.owner = py::reinterpret_borrow<py::object>(obj);
  } else if (py::hasattr(obj, "__dlpack__")) {
    py::object t = py::reinterpret_borrow<py::object>(obj);
    // torch refuses to export a tensor that requires grad; detach() is a view.
    if (py::hasattr(t, "requires_grad") && py::bool_(t.attr("requires_grad"))) t = t.attr("detach")();
    if (py::hasattr(t, "__dlpack_device__")) {
      py::tuple dev = t.attr("__dlpack_device__")();
      if (dev[0].cast<int>() != kDLCPU) {
        if (copied || !py::hasattr(t, "cpu")) tensor_error(h.key, "tensor is not on the CPU");
        if (!g_noted_device_copy) {
          g_noted_device_copy = true;
          if (PyErr_WarnEx(PyExc_RuntimeWarning,
                           "vigil: tensors on an accelerator are copied to the CPU to compute "
                           "their stats (noted once)", 1) != 0)
            throw py::error_already_set();
        }
        // The copy is read like any CPU tensor (DLPack or buffer) and kept
        // alive by the capsule or buffer that `h` holds.
        py::object copy = t.attr("cpu")();
        hold_tensor(h, copy, /*copied=*/true);
        return;
      }
    }
    py::object cap = t.attr("__dlpack__")();
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), "dltensor"));
    if (!m) {
      PyErr_Clear();
      tensor_error(h.key, "__dlpack__ did not return a DLPack capsule");
    }
    // The capsule keeps ownership: its destructor calls the deleter when
    // `owner` is dropped after observe (the name stays "dltensor").
    h.owner = cap;
    const DLTensor& dl = m->dl_tensor;
    if (dl.device.device_type != kDLCPU) tensor_error(h.key, "tensor is not on the CPU");
    if (dl.dtype.lanes != 1) tensor_error(h.key, "vector element types are not supported");
    if (dl.dtype.code == 2 && dl.dtype.bits == 32) h.view.dtype = vigil::DType::float32;
    else if (dl.dtype.code == 2 && dl.dtype.bits == 64) h.view.dtype = vigil::DType::float64;
    else if (dl.dtype.code == 2 && dl.dtype.bits == 16) h.view.dtype = vigil::DType::float16;
    else if (dl.dtype.code == 4 && dl.dtype.bits == 16) h.view.dtype = vigil::DType::bfloat16;
    else {
      const char* kind = dl.dtype.code == 0 ? "int" : dl.dtype.code == 1 ? "uint" : dl.dtype.code == 6 ? "bool" : "code ";
      tensor_error(h.key, fmt::format("unsupported dtype {}{} (vigil reads float32, float64, "
                                      "float16 and bfloat16; convert with .float())",
                                      kind, dl.dtype.code <= 1 || dl.dtype.code == 6
                                                ? fmt::format("{}", dl.dtype.bits)
                                                : fmt::format("{}/{}", dl.dtype.code, dl.dtype.bits)));
    }
    h.shape.assign(dl.shape, dl.shape + dl.ndim);
    if (dl.strides) h.strides.assign(dl.strides, dl.strides + dl.ndim);
    h.view.data = static_cast<const char*>(dl.data) + dl.byte_offset;
  } else {
    tensor_error(h.key, fmt::format("expected a torch.Tensor or numpy array (an object with the "
                                    "buffer protocol or __dlpack__), not {}", type_name(obj)));
  }
  if (h.shape.size() > 16) tensor_error(h.key, "more than 16 dimensions");
  h.view.shape = h.shape;
  h.view.strides = h.strides;
}

// --- the engine --------------------------------------------------------------

// A Python callable held by a C++ std::function: the engine may copy or drop
// its callbacks while the GIL is released, so the reference count is only
// touched here, under the GIL.
struct PyRef {
  py::object fn;
  explicit PyRef(py::object f) : fn(std::move(f)) {}
  ~PyRef() {
    py::gil_scoped_acquire gil;
    fn = py::object();
  }
};

struct EngineObj {
  std::unique_ptr<vigil::Engine> engine;
  std::uint64_t generation = 0;  // observe() calls so far
  std::atomic<bool> busy{false};
  std::thread::id busy_thread;
  std::optional<py::error_already_set> callback_error;
  std::unique_ptr<vigil::JsonlWriter> writer;
  std::shared_ptr<PyRef> recorder;

  // Series ids by key object: a training loop hands over the same str
  // objects every step (its literals), so a pointer lookup replaces hashing
  // the key's text. Each cached key is kept alive, so a pointer can never
  // name another string; the cache stops growing at a bound (keys built
  // anew each step then take the text path).
  std::unordered_map<PyObject*, vigil::SeriesId> key_ids;
  std::vector<py::object> key_refs;
  static constexpr std::size_t max_cached_keys = 4096;

  bool gil_held_in_last_evaluation = false;  // for the test that the GIL is released

  std::vector<vigil::Sample> samples;  // scratch, reused
  std::vector<vigil::TensorSample> tensor_samples;

  // Guards against a second thread (the GIL is released during observe) and
  // against re-entry from a callback, whose message says which it is. Both
  // checks run under the GIL, so busy_thread is read after it was written.
  struct Busy {
    EngineObj& e;
    Busy(EngineObj& engine, const char* what) : e(engine) {
      e.check_idle(what);
      e.busy = true;
      e.busy_thread = std::this_thread::get_id();
    }
    ~Busy() { e.busy = false; }
  };
  void check_idle(const char* what) const {
    if (!busy) return;
    if (busy_thread == std::this_thread::get_id())
      throw vigil::Error(fmt::format("{}() called from an action callback", what));
    throw vigil::Error(fmt::format("{}(): the engine is in use by another thread (an Engine "
                                   "is single-threaded; use one per thread)", what));
  }

  void on(const std::string& action, py::object fn) {
    check_idle("on");
    if (fn.is_none()) {
      engine->on(action, {});
      return;
    }
    if (!PyCallable_Check(fn.ptr())) throw py::type_error("on(): the callback must be callable");
    auto ref = std::make_shared<PyRef>(std::move(fn));
    engine->on(action, [this, ref](const vigil::Firing& f, const vigil::Action& a) {
      py::gil_scoped_acquire gil;
      // Every callback of the observation runs even after one raised (as the
      // C++ engine dispatches, engine.hpp): the first exception is held and
      // raised from observe(), later ones are dropped.
      try {
        ref->fn(copy_firing(f, this, generation), ActionObj{a});
      } catch (py::error_already_set& e) {
        if (!callback_error) callback_error.emplace(std::move(e));
      } catch (const std::exception& e) {
        if (!callback_error) {
          PyErr_SetString(PyExc_RuntimeError, e.what());
          callback_error.emplace();
        }
      }
    });
  }

  py::list observe(std::int64_t step, py::handle values, const std::string& mode,
                   py::handle time, py::handle tensors, bool only_due) {
    Busy busy_guard(*this, "observe");
    vigil::ObserveOptions options;
    options.mode = mode;
    if (!time.is_none()) {
      options.time = PyFloat_AsDouble(time.ptr());
      if (options.time == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        throw py::type_error(fmt::format("observe: time must be a number or None, not {}", type_name(time)));
      }
    }
    samples.clear();
    if (!values.is_none()) {
      if (!PyDict_Check(values.ptr()))
        throw py::type_error(fmt::format("observe: values must be a dict of series key -> number, "
                                         "not {}", type_name(values)));
      samples.reserve(static_cast<std::size_t>(PyDict_Size(values.ptr())));
      PyObject *k = nullptr, *v = nullptr;
      Py_ssize_t pos = 0;
      while (PyDict_Next(values.ptr(), &pos, &k, &v)) {
        double x = 0;
        const bool exact_float = PyFloat_CheckExact(v);
        if (exact_float) x = PyFloat_AS_DOUBLE(v);
        if (auto hit = key_ids.find(k); hit != key_ids.end() && exact_float) {
          samples.push_back({hit->second, x});
          continue;
        }
        if (!PyUnicode_Check(k))
          throw py::type_error(fmt::format("observe: series keys must be str, not {}", type_name(k)));
        Py_ssize_t n = 0;
        const char* s = PyUnicode_AsUTF8AndSize(k, &n);
        if (!s) throw py::error_already_set();
        const std::string_view key(s, static_cast<std::size_t>(n));
        if (!exact_float) {
          x = PyFloat_AsDouble(v);
          if (x == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            throw py::type_error(fmt::format("observe: value of '{}' must be a number, not {}", key,
                                             type_name(v)));
          }
        }
        const auto id = engine->series(key);
        if (!id)
          throw py::value_error(fmt::format("observe: malformed series key '{}' (expected name or "
                                            "name{{label=\"value\",...}})", key));
        if (key_ids.size() < max_cached_keys && key_ids.emplace(k, *id).second)
          key_refs.push_back(py::reinterpret_borrow<py::object>(k));
        samples.push_back({*id, x});
      }
    }
    std::vector<HeldTensor> held;
    tensor_samples.clear();
    if (!tensors.is_none()) {
      if (!PyDict_Check(tensors.ptr()))
        throw py::type_error(fmt::format("observe: tensors must be a dict of tensor series key -> "
                                         "tensor, not {}", type_name(tensors)));
      held.reserve(static_cast<std::size_t>(PyDict_Size(tensors.ptr())));
      PyObject *k = nullptr, *v = nullptr;
      Py_ssize_t pos = 0;
      while (PyDict_Next(tensors.ptr(), &pos, &k, &v)) {
        if (!PyUnicode_Check(k))
          throw py::type_error(fmt::format("observe: tensor keys must be str, not {}", type_name(k)));
        Py_ssize_t n = 0;
        const char* s = PyUnicode_AsUTF8AndSize(k, &n);
        if (!s) throw py::error_already_set();
        const std::string_view key(s, static_cast<std::size_t>(n));
        const auto id = engine->tensor(key);
        if (!id)
          throw py::value_error(fmt::format("observe: malformed tensor series key '{}' (expected "
                                            "name or name{{label=\"value\",...}})", key));
        // A tensor no rule reads (or, with only_due, none needs at this
        // step) is not even looked at: no DLPack export, no device copy.
        if (engine->tensor_stats_used(*id) == 0) continue;
        const vigil::StatMask due = only_due ? engine->tensor_stats_due(*id, step, mode) : ~vigil::StatMask{0};
        if (due == 0) continue;
        HeldTensor& h = held.emplace_back();
        h.key = std::string(key);
        h.id = *id;
        h.due = due;
        hold_tensor(h, v);
      }
      for (const auto& h : held) tensor_samples.push_back({h.id, h.view, h.due});
    }

    const std::uint64_t gen = ++generation;
    std::span<const vigil::Firing> fired;
    {
      py::gil_scoped_release release;
      gil_held_in_last_evaluation = PyGILState_Check() != 0;
      fired = tensor_samples.empty() ? engine->observe(step, samples, options)
                                     : engine->observe(step, samples, tensor_samples, options);
    }
    held.clear();  // under the GIL: releases buffers and capsules
    if (callback_error) {
      py::error_already_set e = std::move(*callback_error);
      callback_error.reset();
      throw e;
    }
    py::list out;
    for (const auto& f : fired) out.append(py::cast(copy_firing(f, this, gen)));
    return out;
  }

  std::string explain(const FiringObj& f) {
    if (busy && busy_thread != std::this_thread::get_id()) check_idle("explain");
    if (f.engine != this) throw vigil::Error("explain: the firing comes from another engine");
    if (f.generation != generation || !f.source)
      throw vigil::Error(fmt::format("explain: the firing of '{}' at step {} is from an earlier "
                                     "observe(); explain a firing before the next observe()",
                                     f.rule, f.step));
    return engine->explain(*f.source);
  }

  void record(py::object target, bool append) {
    Busy busy_guard(*this, "record");
    engine->record({});
    writer.reset();
    recorder.reset();
    if (target.is_none()) return;
    if (PyCallable_Check(target.ptr())) {
      recorder = std::make_shared<PyRef>(std::move(target));
      engine->record([this, ref = recorder](const vigil::Observation& o) {
        py::gil_scoped_acquire gil;
        if (callback_error) return;
        try {
          py::dict values;
          for (const auto& [k, v] : o.values) values[py::str(k)] = py::float_(v);
          py::dict obs;
          obs["step"] = o.step;
          obs["mode"] = o.mode;
          obs["time"] = optional_float(o.time);
          obs["values"] = values;
          ref->fn(obs);
        } catch (py::error_already_set& e) {
          callback_error.emplace(std::move(e));
        }
      });
      return;
    }
    const std::string path = fspath(target);
    vigil::TraceError err;
    writer = vigil::JsonlWriter::create(path, err, append);
    if (!writer) throw py::value_error(fmt::format("record: {}", err.format()));
    engine->record([w = writer.get()](const vigil::Observation& o) { w->write(o); });
  }
};

}  // namespace

PYBIND11_MODULE(_vigil, m) {
  m.doc() = "Vigil: a rule engine for ML training runs (the C++ engine, bound for Python)";

  static py::exception<vigil::Error> error_type(m, "Error", PyExc_RuntimeError);
  error_type.doc() = "Misuse of the API (never raised for data).";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const vigil::Error& e) {
      PyErr_SetString(error_type.ptr(), e.what());
    }
  });
  // CompileError(Error): str() is the rendered diagnostics; .diagnostics the list.
  py::object compile_error = py::reinterpret_steal<py::object>(
      PyErr_NewExceptionWithDoc("vigil._vigil.CompileError",
                                "Rule text that does not compile. str() is the rendered "
                                "diagnostics (file:line:col, source line, caret); .diagnostics "
                                "is a list of dicts (level, code, message, file, line, col, "
                                "suggestion, text).",
                                error_type.ptr(), nullptr));
  m.attr("CompileError") = compile_error;
  g_compile_error = compile_error;
  g_compile_error.inc_ref();  // module-lifetime global; never released at exit

  py::class_<ProgramObj>(m, "Program", "A compiled, immutable rule set (share it between engines).")
      .def_property_readonly("rules", [](const ProgramObj& p) {
        py::list out;
        for (const auto& r : p.program.rules()) {
          py::dict d;
          d["name"] = r.name;
          d["description"] = r.description;
          d["severity"] = std::string(vigil::to_string(r.severity));
          d["mode"] = r.mode.empty() ? py::object(py::none()) : py::object(py::str(r.mode));
          py::list actions;
          for (const auto& a : r.actions) actions.append(a.name);
          d["actions"] = actions;
          d["reads"] = r.reads;
          d["template"] = r.template_name.empty() ? py::object(py::none()) : py::object(py::str(r.template_name));
          out.append(d);
        }
        return out;
      }, "The rules: dicts of name, description, severity, mode, actions, reads, template.")
      .def_property_readonly("params", [](const ProgramObj& p) {
        py::dict d;
        for (const auto& [k, v] : p.program.params()) d[py::str(k)] = value_to_py(v);
        return d;
      }, "Final values of the file's params after overrides.")
      .def_property_readonly("warnings", [](const ProgramObj& p) { return p.warnings; },
                             "Rendered warning diagnostics of the compilation.")
      .def_property_readonly("actions", [](const ProgramObj& p) {
        std::vector<std::string> names;
        for (const auto& r : p.program.rules()) {
          for (const auto& a : r.actions) names.push_back(a.name);
          for (const auto& e : r.escalations)
            for (const auto& a : e.actions) names.push_back(a.name);
        }
        std::sort(names.begin(), names.end());
        names.erase(std::unique(names.begin(), names.end()), names.end());
        return names;
      }, "Every action name some rule (or escalation) uses, sorted.")
      .def("__repr__", [](const ProgramObj& p) {
        return fmt::format("<vigil.Program: {} rules>", p.program.rules().size());
      });

  m.def("compile", [](const std::string& text, py::object params, const std::string& name,
                      py::object aliases) {
        auto options = compile_options(params, aliases);
        vigil::CompileResult r;
        {
          py::gil_scoped_release release;
          r = vigil::compile_string(text, name, options);
        }
        return finish_compile(r);
      }, py::arg("text"), py::arg("params") = py::none(), py::kw_only(), py::arg("name") = "<input>",
      py::arg("aliases") = py::none(),
      "Compiles rule text. `import` paths resolve relative to the current directory.\n"
      "Raises vigil.CompileError with every diagnostic.");
  m.def("compile_file", [](py::object path, py::object params, py::object aliases) {
        std::vector<std::string> paths;
        if (py::isinstance<py::list>(path) || py::isinstance<py::tuple>(path)) {
          for (auto p : path) paths.push_back(fspath(p));
        } else {
          paths.push_back(fspath(path));
        }
        auto options = compile_options(params, aliases);
        vigil::CompileResult r;
        {
          py::gil_scoped_release release;
          r = vigil::compile_files(paths, options);
        }
        return finish_compile(r);
      }, py::arg("path"), py::arg("params") = py::none(), py::kw_only(),
      py::arg("aliases") = py::none(),
      "Compiles a rule file (or a list of them, as one program). `import` paths resolve\n"
      "relative to the importing file. Raises vigil.CompileError.");

  m.def("series_key", [](const std::string& name, py::object labels) {
        vigil::Labels l;
        if (!labels.is_none())
          for (auto item : labels.cast<py::dict>())
            l.emplace_back(py::str(item.first).cast<std::string>(), py::str(item.second).cast<std::string>());
        std::sort(l.begin(), l.end());
        return vigil::format_series_key(name, l);
      }, py::arg("name"), py::arg("labels") = py::none(),
      "The canonical series key: series_key('grad', {'layer': 'fc1.weight'}) == "
      "'grad{layer=\"fc1.weight\"}'.");

  m.def("to_jsonl", [](const py::dict& obs) {
        vigil::Observation o;
        o.step = obs["step"].cast<std::int64_t>();
        if (obs.contains("mode")) o.mode = obs["mode"].cast<std::string>();
        if (obs.contains("time") && !obs["time"].is_none()) o.time = obs["time"].cast<double>();
        if (obs.contains("values"))
          for (auto item : obs["values"].cast<py::dict>())
            o.values.emplace_back(item.first.cast<std::string>(), item.second.cast<double>());
        return vigil::to_jsonl(o);
      }, py::arg("observation"),
      "One observation dict (step, mode, time, values; as a recorder receives it) as a Vigil "
      "JSONL line, without the newline.");

  // For python/bench/bench_python.py: the C++ cost of the same observations
  // (keys interned once, as a C++ host does), to set the binding's own cost
  // per call apart from the engine's. Not part of the API.
  m.def("_observe_loop", [](EngineObj& e, std::int64_t first_step, std::int64_t calls,
                            const std::vector<std::map<std::string, double>>& pool) {
        std::vector<std::vector<vigil::Sample>> samples;
        for (const auto& values : pool) {
          auto& s = samples.emplace_back();
          for (const auto& [k, v] : values) s.push_back({*e.engine->series(k), v});
        }
        EngineObj::Busy b(e, "_observe_loop");
        py::gil_scoped_release release;
        const auto t0 = std::chrono::steady_clock::now();
        std::size_t fired = 0;
        for (std::int64_t i = 0; i < calls; ++i)
          fired += e.engine->observe(first_step + i, samples[static_cast<std::size_t>(i) % samples.size()]).size();
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        return std::make_pair(seconds, fired);
      });

  py::class_<ActionObj>(m, "Action", "One action of a firing: `reduce_lr(factor = 0.5)`.")
      .def_property_readonly("name", [](const ActionObj& a) { return a.action.name; })
      .def_property_readonly("args", &ActionObj::args, "The arguments, a dict name -> float/str/bool.")
      .def("__repr__", [](const ActionObj& a) {
        return fmt::format("<vigil.Action {}>", a.action.name);
      });

  py::class_<FiringObj>(m, "Firing", "A rule that became true at an observation.")
      .def_readonly("rule", &FiringObj::rule)
      .def_readonly("step", &FiringObj::step)
      .def_readonly("mode", &FiringObj::mode)
      .def_property_readonly("time", [](const FiringObj& f) { return optional_float(f.time); })
      .def_readonly("severity", &FiringObj::severity)
      .def_property_readonly("labels", [](const FiringObj& f) { return labels_dict(f.labels); })
      .def_property_readonly("value", [](const FiringObj& f) -> py::object {
        if (!f.value) return py::none();
        return py::float_(*f.value);
      })
      .def_property_readonly("actions", [](const FiringObj& f) {
        std::vector<std::string> names;
        for (const auto& a : f.actions) names.push_back(a.name);
        return names;
      }, "The names of the actions this firing runs.")
      .def_property_readonly("action_list", [](const FiringObj& f) {
        std::vector<ActionObj> out;
        for (const auto& a : f.actions) out.push_back({a});
        return out;
      }, "The actions with their arguments (vigil.Action objects).")
      .def_readonly("pending_since", &FiringObj::pending_since)
      .def_readonly("escalation", &FiringObj::escalation)
      .def_property_readonly("key", &FiringObj::key, "The rule name with the labels: `rule{layer=\"fc1\"}`.")
      .def("__repr__", [](const FiringObj& f) {
        return fmt::format("<vigil.Firing {} step={} mode={} value={}>", f.key(), f.step, f.mode,
                           f.value ? fmt::format("{}", *f.value) : std::string("None"));
      });

  py::class_<vigil::EngineStats>(m, "Stats", "Engine counters.")
      .def_readonly("observations", &vigil::EngineStats::observations)
      .def_readonly("out_of_order", &vigil::EngineStats::out_of_order)
      .def_readonly("firings", &vigil::EngineStats::firings)
      .def_readonly("gather_failures", &vigil::EngineStats::gather_failures)
      .def("__repr__", [](const vigil::EngineStats& s) {
        return fmt::format("<vigil.Stats observations={} out_of_order={} firings={}>",
                           s.observations, s.out_of_order, s.firings);
      });

  py::class_<EngineObj>(m, "Engine", "Evaluates a Program over observations; one per thread.")
      .def(py::init([](const ProgramObj& program, const std::string& unbound, py::object params,
                       py::object allgather) {
             vigil::EngineOptions o;
             if (!allgather.is_none()) {
               if (!PyCallable_Check(allgather.ptr()))
                 throw py::type_error("allgather must be callable: allgather(local) -> all");
               // Called by the engine without the GIL; a failure (an exception,
               // a result of the wrong length) makes the engine use this
               // process's own stats and count stats().gather_failures.
               auto ref = std::make_shared<PyRef>(std::move(allgather));
               o.allgather = [ref](std::span<const double> local, std::vector<double>& all) {
                 py::gil_scoped_acquire gil;
                 try {
                   py::list in;
                   for (double x : local) in.append(x);
                   py::object out = ref->fn(in);
                   all.clear();
                   for (auto item : out) all.push_back(item.cast<double>());
                   if (local.empty()) return all.empty();
                   return !all.empty() && all.size() % local.size() == 0;
                 } catch (py::error_already_set& e) {
                   const std::string what = e.what();
                   PyErr_WarnEx(PyExc_RuntimeWarning,
                                ("vigil: allgather failed, using this process's stats: " + what).c_str(), 1);
                   PyErr_Clear();
                   return false;
                 } catch (const std::exception&) {
                   return false;
                 }
               };
             }
             if (unbound == "error") o.unbound = vigil::UnboundActions::error;
             else if (unbound == "record") o.unbound = vigil::UnboundActions::record;
             else throw py::value_error(fmt::format("unbound must be \"error\" or \"record\", not \"{}\"", unbound));
             o.params = params_from(params);
             auto e = std::make_unique<EngineObj>();
             e->engine = std::make_unique<vigil::Engine>(program.program, std::move(o));
             return e;
           }),
           py::arg("program"), py::arg("unbound") = "error", py::kw_only(), py::arg("params") = py::none(),
           py::arg("allgather") = py::none())
      .def("on", &EngineObj::on, py::arg("action"), py::arg("callback"),
           "Binds callback(firing, action) to an action name (None unbinds).")
      .def("observe", &EngineObj::observe, py::arg("step"), py::arg("values") = py::none(),
           py::kw_only(), py::arg("mode") = "train", py::arg("time") = py::none(),
           py::arg("tensors") = py::none(), py::arg("only_due") = false,
           "Feeds one observation, runs the callbacks of its firings, returns the firings. "
           "only_due: hand over only the tensors the rules need at this step and mode, and "
           "compute only their due stats (tensor_due); the firings are the same.")
      .def("explain", &EngineObj::explain, py::arg("firing"),
           "A readable account of a firing from the latest observe().")
      .def("save_state", [](EngineObj& e) {
             EngineObj::Busy b(e, "save_state");
             return py::bytes(e.engine->save_state());
           }, "The engine's state (windows, pending counts) as bytes for a checkpoint.")
      .def("restore_state", [](EngineObj& e, const py::bytes& bytes) {
             EngineObj::Busy b(e, "restore_state");
             e.engine->restore_state(std::string_view(bytes));
             ++e.generation;
           }, py::arg("state"), "Restores bytes from save_state() of an engine over the same program.")
      .def_property_readonly("pending", [](const EngineObj& e) { return e.engine->pending(); },
                             "True while some rule is pending or firing.")
      .def_property_readonly("stats", [](const EngineObj& e) { return e.engine->stats(); })
      .def_property_readonly("program", [](const EngineObj& e) {
             return ProgramObj{e.engine->program(), {}};
           })
      .def("unbound_actions", [](const EngineObj& e) {
             std::vector<std::string> out;
             for (const auto& d : e.engine->unbound_actions())
               out.push_back(vigil::format_diagnostic(d, e.engine->program().sources()));
             return out;
           }, "Rendered diagnostics for every action no callback is bound to.")
      .def("tensor_used", [](EngineObj& e, const std::string& key) {
             const auto id = e.engine->tensor(key);
             if (!id) throw py::value_error(fmt::format("malformed tensor series key '{}'", key));
             return e.engine->tensor_stats_used(*id) != 0;
           }, py::arg("key"), "Whether some rule reads a stat of this tensor series.")
      .def("tensor_due", [](EngineObj& e, const std::string& key, std::int64_t step,
                            const std::string& mode) {
             e.check_idle("tensor_due");
             const auto id = e.engine->tensor(key);
             if (!id) throw py::value_error(fmt::format("malformed tensor series key '{}'", key));
             return e.engine->tensor_stats_due(*id, step, mode) != 0;
           }, py::arg("key"), py::arg("step"), py::arg("mode") = "train",
           "Whether the next observation, at this step and mode, needs this tensor series "
           "(Engine::tensor_stats_due): a rule reads it through a window or stateful function, "
           "or a rule reading it may evaluate there (its every/after/until in steps and its mode).")
      .def_property_readonly("_gil_held_in_last_evaluation",
                             [](const EngineObj& e) { return e.gil_held_in_last_evaluation; })
      .def("record", &EngineObj::record, py::arg("target"), py::kw_only(), py::arg("append") = false,
           "Records every observation: to a Vigil JSONL file (a path), to a callable(dict), "
           "or stops (None).");
}
