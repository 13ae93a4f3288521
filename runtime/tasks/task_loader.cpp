#include "tasks/task_loader.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "config/toml_reader.h"
#include "crucible/eval/evaluator.h"

namespace crucible::tasks {
namespace fs = std::filesystem;
using config::TableReader;
using eval::TaskSpec;
using eval::TensorSpec;

namespace {

eval::DType read_dtype(TableReader& r) {
  std::string name = r.require_string("dtype");
  auto d = eval::parse_dtype(name);
  if (!d) r.fail("dtype", "unknown dtype '" + name + "' (float32, float16, bfloat16, float64, int32, int64, bool)");
  return *d;
}

eval::InitSpec read_init(TableReader& r) {
  eval::InitSpec init;
  std::string dist = r.require_string("dist");
  if (dist == "normal") {
    init.kind = eval::InitSpec::Kind::normal;
    init.mean = r.get_number("mean", 0.0);
    init.std = r.get_number("std", 1.0);
    if (init.std <= 0) r.fail("std", "must be positive");
  } else if (dist == "uniform") {
    init.kind = eval::InitSpec::Kind::uniform;
    init.low = r.get_number("low", 0.0);
    init.high = r.get_number("high", 1.0);
    if (init.high <= init.low) r.fail("high", "must be greater than low");
  } else if (dist == "randint") {
    init.kind = eval::InitSpec::Kind::randint;
    init.low = static_cast<double>(r.get_int("low", 0));
    const toml::node* high = r.node("high");
    if (high && high->is_string()) init.high_symbol = r.require_string("high");
    else init.high = static_cast<double>(r.require_int("high"));
  } else if (dist == "constant") {  // a parameter PyTorch initialises to one value (a norm's weight, a bias)
    init.kind = eval::InitSpec::Kind::constant;
    init.mean = r.require_number("value");
  } else if (dist == "cauchy") {  // heavy tails (GPU MODE's TriMul draws Cauchy(0, 2) inputs)
    init.kind = eval::InitSpec::Kind::cauchy;
    init.mean = r.get_number("median", 0.0);
    init.std = r.get_number("gamma", 1.0);  // the scale parameter ("scale" is every distribution's trial range)
    if (init.std <= 0) r.fail("gamma", "must be positive");
  } else if (dist == "choice") {  // two values, equally likely (labels of +-1)
    init.kind = eval::InitSpec::Kind::choice;
    auto values = r.get_number_array("values");
    // Two values only: the evaluator's fresh inputs reflect draws about the centre, which swaps two values.
    if (values.size() != 2 || !(values[0] < values[1])) r.fail("values", "expected two values [a, b] with a < b");
    init.low = values[0];
    init.high = values[1];
  } else {
    r.fail("dist", "unknown distribution '" + dist + "' (normal, uniform, randint, constant, choice, cauchy)");
  }
  const std::string transform = r.get_string("transform", "none");
  if (transform == "triu") init.transform = eval::InitSpec::Transform::triu;
  else if (transform == "tril") init.transform = eval::InitSpec::Transform::tril;
  else if (transform == "symmetric") init.transform = eval::InitSpec::Transform::symmetric;
  else if (transform == "softmax") init.transform = eval::InitSpec::Transform::softmax;
  else if (transform != "none") r.fail("transform", "unknown transform '" + transform + "' (triu, tril, symmetric, softmax)");
  auto scale = r.get_number_array("scale");
  if (!scale.empty()) {
    if (scale.size() != 2 || scale[0] <= 0 || scale[1] < scale[0]) r.fail("scale", "expected [low, high] with 0 < low <= high");
    init.scale_low = scale[0];
    init.scale_high = scale[1];
  }
  r.finish();
  return init;
}

TensorSpec read_tensor(TableReader& r, bool is_input) {
  TensorSpec t;
  t.name = r.require_string("name");
  t.dtype = read_dtype(r);
  t.shape = r.require_scalar_array("shape");
  if (is_input) {
    if (auto init = r.get_table("init")) {
      t.init = read_init(*init);
      bool scaled = t.init.scale_low != 1.0 || t.init.scale_high != 1.0;
      if (scaled && !eval::is_floating(t.dtype)) init->fail("scale", "only floating-point inputs can be scaled");
      if (t.init.kind == eval::InitSpec::Kind::randint && eval::is_floating(t.dtype))
        init->fail("dist", "randint needs an integer dtype");
      if (t.init.kind == eval::InitSpec::Kind::choice && !eval::is_floating(t.dtype))
        init->fail("dist", "choice needs a floating-point dtype");
      using Transform = eval::InitSpec::Transform;
      const auto transform = t.init.transform;
      if ((transform == Transform::symmetric || transform == Transform::softmax) && !eval::is_floating(t.dtype))
        init->fail("transform", "needs a floating-point dtype");
      if ((transform == Transform::triu || transform == Transform::tril || transform == Transform::symmetric) &&
          t.shape.size() < 2)
        init->fail("transform", "needs at least two dimensions");
      if (transform == Transform::symmetric && t.shape[t.shape.size() - 1] != t.shape[t.shape.size() - 2])
        init->fail("transform", "symmetric needs square matrices: the last two dimensions must be the same symbol");
    }
  }
  r.finish();
  return t;
}

void check_symbols(TableReader& r, const std::string& key, const TensorSpec& t, const TaskSpec& task) {
  for (const auto& [backend, sizes] : task.sizes) {
    try {
      eval::resolve_shape(t, sizes);
      if (!t.init.high_symbol.empty()) eval::resolve_dim(t.init.high_symbol, sizes);
    } catch (const std::invalid_argument& e) {
      r.fail(t.init.high_symbol.empty() ? key : "init", std::string(e.what()) + " in sizes." + backend);
    }
  }
}

TaskSpec read_task(const toml::table& root, const std::string& source) {
  TableReader r(root, source);
  TaskSpec task;
  task.source_path = source;
  task.name = r.require_string("name");
  r.require_int("level");  // required, and an integer
  task.level = r.get_int_in("level", 0, 0, 100);
  task.family = r.require_string("family");
  task.description = r.require_string("description");
  task.reference = r.require_string("reference");
  auto known = eval::known_references();
  if (task.reference == "torchscript") {
    // Imported tasks: a traced program per size set, beside the task file.
    auto files = r.require_table("reference_files");
    for (const auto& size_set : files.keys()) {
      const fs::path file = fs::path(source).parent_path() / files.require_string(size_set);
      if (!fs::is_regular_file(file)) files.fail(size_set, "no such file: " + file.string());
      task.reference_files[size_set] = fs::absolute(file).string();
    }
    files.finish();
    if (task.reference_files.empty()) r.fail("reference_files", "name the TorchScript file of at least one size set");
  } else if (std::find(known.begin(), known.end(), task.reference) == known.end()) {
    r.fail("reference", "unknown built-in reference '" + task.reference + "' (or \"torchscript\" with reference_files)");
  }
  if (auto origin = r.get_table("kernelbench")) {
    for (const auto& key : origin->keys()) {
      const toml::node* v = origin->node(key);
      if (const auto* str = v->as_string()) task.origin[key] = str->get();
      else if (const auto* i = v->as_integer()) task.origin[key] = std::to_string(i->get());
      else origin->fail(key, "expected a string or an integer");
    }
  }
  task.reference_source = r.require_string("reference_source");
  task.flops = r.get_string("flops", "");
  task.allow_imports = r.get_string_array("allow_imports");
  task.constant_output = r.get_bool("constant_output", false);
  task.min_correctness_trials = r.get_int_in("min_correctness_trials", 0, 0, 100);

  auto sizes = r.require_table("sizes");
  for (const auto& backend : sizes.keys()) {
    if (backend != "cpu" && backend != "cuda") sizes.fail(backend, "unknown backend (cpu, cuda)");
    auto table = sizes.require_table(backend);
    eval::Sizes values;
    for (const auto& symbol : table.keys()) {
      values[symbol] = table.require_int(symbol);
      if (values[symbol] <= 0) table.fail(symbol, "sizes must be positive");
    }
    table.finish();
    task.sizes[backend] = values;
  }
  sizes.finish();
  if (!task.sizes.count("cpu")) r.fail("sizes", "a [sizes.cpu] table is required");

  auto inputs = r.require_table_array("inputs");
  auto outputs = r.require_table_array("outputs");
  if (inputs.empty()) r.fail("inputs", "at least one input is required");
  if (outputs.empty()) r.fail("outputs", "at least one output is required");
  for (auto& t : inputs) {
    task.inputs.push_back(read_tensor(t, true));
    check_symbols(t, "shape", task.inputs.back(), task);
  }
  for (auto& t : outputs) {
    task.outputs.push_back(read_tensor(t, false));
    check_symbols(t, "shape", task.outputs.back(), task);
  }

  if (r.node("shapes")) {
    auto shapes = r.require_table("shapes");
    for (const auto& size_set : shapes.keys()) {
      if (!task.sizes.count(size_set)) shapes.fail(size_set, "no [sizes." + size_set + "] for these shapes");
      for (auto& c : shapes.require_table_array(size_set)) {
        eval::ShapeCase sc;
        sc.name = c.require_string("name");
        auto table = c.require_table("sizes");
        for (const auto& symbol : table.keys()) {
          sc.sizes[symbol] = table.require_int(symbol);
          if (sc.sizes[symbol] <= 0) table.fail(symbol, "sizes must be positive");
        }
        table.finish();
        if (auto inits = c.get_table("init")) {
          for (const auto& input : inits->keys()) {
            const bool known_input = std::any_of(task.inputs.begin(), task.inputs.end(),
                                                 [&](const eval::TensorSpec& t) { return t.name == input; });
            if (!known_input) inits->fail(input, "no input of this name");
            auto init = inits->require_table(input);
            sc.inits[input] = read_init(init);
          }
          inits->finish();
        }
        c.finish();
        const eval::TaskSpec at = task.at_case(sc, size_set);
        for (const auto& t : at.inputs) {
          try {
            eval::resolve_shape(t, sc.sizes);
          } catch (const std::invalid_argument& e) {
            shapes.fail(size_set, "shape '" + sc.name + "': " + e.what());
          }
        }
        task.shape_cases[size_set].push_back(std::move(sc));
      }
    }
    shapes.finish();
  }

  if (auto params = r.get_table("params")) {
    for (const auto& key : params->keys()) task.params[key] = params->require_number(key);
    params->finish();
  }
  auto tolerance = r.require_table("tolerance");
  for (const auto& name : tolerance.keys()) {
    auto dtype = eval::parse_dtype(name);
    if (!dtype) tolerance.fail(name, "unknown dtype");
    auto t = tolerance.require_table(name);
    task.tolerance[*dtype] = {t.require_number("atol"), t.require_number("rtol")};
    t.finish();
  }
  tolerance.finish();
  for (const auto& out : task.outputs)
    if (eval::is_floating(out.dtype) && !task.tolerance.count(out.dtype))
      r.fail("tolerance", "no tolerance for output dtype " + std::string(eval::dtype_name(out.dtype)));
  if (!task.flops.empty()) {
    try {
      eval::evaluate_product(task.flops, task.sizes.at("cpu"));
    } catch (const std::invalid_argument& e) {
      r.fail("flops", e.what());
    }
  }
  r.finish();
  return task;
}

}  // namespace

TaskSpec load_task_file(const fs::path& path) {
  toml::table root = config::parse_toml_file(path);
  return read_task(root, path.string());
}

TaskSpec parse_task_text(const std::string& text, const std::string& source) {
  toml::table root = config::parse_toml_text(text, source);
  return read_task(root, source);
}


fs::path default_tasks_dir() {
  if (const char* env = std::getenv("CRUCIBLE_TASKS_DIR")) return env;
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (fs::path dir = self.parent_path(); dir.has_relative_path(); dir = dir.parent_path())
      if (fs::exists(dir / "configs" / "tasks")) return dir / "configs" / "tasks";
  }
  return fs::path("configs") / "tasks";
}

std::vector<fs::path> task_files(const fs::path& dir) {
  std::vector<fs::path> files;
  if (!fs::is_directory(dir)) return files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_regular_file() && entry.path().extension() == ".toml") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

TaskSpec find_task(const std::string& name_or_path, const fs::path& dir) {
  fs::path as_path(name_or_path);
  if (as_path.extension() == ".toml" || fs::is_regular_file(as_path)) return load_task_file(as_path);
  fs::path candidate = dir / (name_or_path + ".toml");
  if (fs::exists(candidate)) return load_task_file(candidate);
  throw std::invalid_argument("no task named '" + name_or_path + "' in " + dir.string());
}

std::string describe_task(const TaskSpec& t) {
  std::ostringstream s;
  auto shape = [](const TensorSpec& x) {
    std::string out = "[";
    for (std::size_t i = 0; i < x.shape.size(); ++i) out += (i ? ", " : "") + x.shape[i];
    return out + "]";
  };
  s << t.name << "  (level " << t.level << ", " << t.family << ")\n" << t.description << "\n\ninputs:\n";
  for (const auto& x : t.inputs) s << "  " << x.name << ": " << eval::dtype_name(x.dtype) << " " << shape(x) << "\n";
  s << "outputs:\n";
  for (const auto& x : t.outputs) s << "  " << x.name << ": " << eval::dtype_name(x.dtype) << " " << shape(x) << "\n";
  for (const auto& [backend, sizes] : t.sizes) {
    s << "sizes." << backend << ":";
    for (const auto& [k, v] : sizes) s << " " << k << "=" << v;
    s << "\n";
  }
  s << "tolerance:";
  for (const auto& [d, tol] : t.tolerance) s << " " << eval::dtype_name(d) << "(atol=" << tol.atol << ", rtol=" << tol.rtol << ")";
  s << "\nreference: " << t.reference << "\n\n" << t.reference_source << "\n";
  return s.str();
}

}  // namespace crucible::tasks
