#include "crucible/eval/shared_timing.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "crucible/eval/compiler.h"
#include "crucible/eval/dtype.h"

namespace crucible::eval {
namespace {

// Each field on its own line, prefixed by its name: two different tasks cannot write the same text.
void write(std::ostream& o, const InitSpec& i) {
  o << "init " << static_cast<int>(i.kind) << ' ' << static_cast<int>(i.transform) << ' ' << i.mean << ' ' << i.std
    << ' ' << i.low << ' ' << i.high << ' ' << i.high_symbol.size() << ':' << i.high_symbol << ' ' << i.scale_low
    << ' ' << i.scale_high << '\n';
}

void write(std::ostream& o, const char* what, const std::vector<TensorSpec>& tensors) {
  for (const auto& t : tensors) {
    o << what << ' ' << t.name.size() << ':' << t.name << ' ' << dtype_name(t.dtype);
    for (const auto& d : t.shape) o << ' ' << d.size() << ':' << d;
    o << '\n';
    write(o, t.init);
  }
}

void write(std::ostream& o, const Sizes& sizes) {
  for (const auto& [symbol, value] : sizes) o << ' ' << symbol << '=' << value;
  o << '\n';
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "unreadable " + path;  // differs from any content, so no entry matches one that was read
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

}  // namespace

std::string task_fingerprint(const TaskSpec& task) {
  std::ostringstream o;
  o.precision(17);
  o << "task " << task.name << "\nlevel " << task.level << "\nreference " << task.reference << '\n';
  for (const auto& [set, path] : task.reference_files) o << "file " << set << ' ' << sha256_hex(file_bytes(path)) << '\n';
  write(o, "input", task.inputs);
  write(o, "output", task.outputs);
  for (const auto& [name, value] : task.params) o << "param " << name << '=' << value << '\n';
  for (const auto& [dtype, tol] : task.tolerance) o << "tolerance " << dtype_name(dtype) << ' ' << tol.atol << ' ' << tol.rtol << '\n';
  for (const auto& [backend, sizes] : task.sizes) {
    o << "sizes " << backend;
    write(o, sizes);
  }
  for (const auto& [set, cases] : task.shape_cases)
    for (const auto& c : cases) {
      o << "case " << set << ' ' << c.name;
      write(o, c.sizes);
      for (const auto& [input, init] : c.inits) {
        o << "case_init " << input << ' ';
        write(o, init);
      }
    }
  for (const auto& symbol : task.allow_imports) o << "import " << symbol << '\n';
  o << "constant_output " << task.constant_output << "\nmin_trials " << task.min_correctness_trials << '\n';
  return sha256_hex(o.str());
}

std::string shared_task_name(const std::string& task) { return task.substr(0, task.find('@')); }

bool plausible(const SharedTiming& t) {
  const auto& r = t.reference;
  const auto positive = [](double x) { return std::isfinite(x) && x > 0.0; };
  return !t.key.empty() && t.key.size() <= kMaxSharedKeyBytes && !t.task.empty() && r.trials > 0 && positive(r.median_us) && positive(r.mean_us) &&
         positive(r.min_us) && positive(r.max_us) && r.min_us <= r.median_us && r.median_us <= r.max_us &&
         std::isfinite(r.cv) && r.cv >= 0.0;
}

}  // namespace crucible::eval
