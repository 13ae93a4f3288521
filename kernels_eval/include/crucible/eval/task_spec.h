#pragma once
// A task as the evaluator sees it: plain values, no TOML and no torch.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "crucible/eval/dtype.h"

namespace crucible::eval {

// How an input is drawn. Bounds may name a size symbol (e.g. randint high = "C").
struct InitSpec {
  enum class Kind { normal, uniform, randint, constant, choice, cauchy };
  // Applied to each drawn tensor after scaling, as a problem's input generator does: triangular parts and
  // symmetric matrices over the last two dimensions, probabilities by a softmax over the last dimension.
  enum class Transform { none, triu, tril, symmetric, softmax };
  Kind kind = Kind::normal;
  Transform transform = Transform::none;
  double mean = 0.0, std = 1.0;  // normal; constant: every element is `mean`; cauchy: median and scale
  double low = 0.0, high = 1.0;  // uniform, randint (high exclusive); choice: the two values, equally likely
  std::string high_symbol;       // randint: a size symbol used as the exclusive upper bound
  // Each trial multiplies the draw by a factor drawn from [scale_low, scale_high], so outputs that
  // concentrate (means, losses) still differ between trials and a fixed answer cannot pass.
  double scale_low = 1.0, scale_high = 1.0;
};

// A shape dimension is a size symbol ("M") or a literal ("3").
struct TensorSpec {
  std::string name;
  DType dtype = DType::float32;
  std::vector<std::string> shape;
  InitSpec init;
};

struct Tolerance {
  double atol = 1e-5;
  double rtol = 1e-5;
};

using Sizes = std::map<std::string, int64_t>;

// One of the shapes a task is scored over (GPU MODE's TriMul has seven): its sizes and, where they differ from the
// task's, its inputs' distributions.
struct ShapeCase {
  std::string name;
  Sizes sizes;
  std::map<std::string, InitSpec> inits;  // by input name
};

struct TaskSpec {
  std::string name;
  int level = 1;
  std::string family;
  std::string description;
  std::string reference;         // a built-in LibTorch reference's name, or "torchscript" (reference_files)
  std::string reference_source;  // PyTorch-style snippet shown in prompts
  // "torchscript": a TorchScript program per size set (absolute paths), traced at those sizes by the importer.
  std::map<std::string, std::string> reference_files;
  // Where an imported task came from and how it was made (KernelBench: problem, id, cpu_scale, ...), as text.
  std::map<std::string, std::string> origin;
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  std::map<std::string, double> params;     // scalar parameters of the reference (eps, kernel size...)
  std::map<DType, Tolerance> tolerance;     // per output dtype
  std::map<std::string, Sizes> sizes;       // backend ("cpu", "cuda") -> symbol -> value
  // Size sets scored over several shapes: a candidate is correct when it is correct on every one, and its time is
  // the geometric mean of theirs (GPU MODE's ranking). Empty for a set: scored at sizes[set] alone.
  std::map<std::string, std::vector<ShapeCase>> shape_cases;
  std::vector<std::string> allow_imports;   // extra symbols a candidate may import (e.g. a BLAS call)
  // The reference's outputs do not depend on its inputs (a few KernelBench problems are written so): the
  // constant-output checks cannot apply, since writing the constant is the right answer.
  bool constant_output = false;
  // Outputs that concentrate (a loss over many elements) let one fixed answer pass a trial by chance; the importer
  // measures that chance and sets the trials a verdict needs so that a fixed answer passes them all rarely.
  int min_correctness_trials = 0;
  std::string flops;                        // optional product expression over size symbols
  std::string source_path;                  // where the spec came from, for messages

  const Sizes& sizes_for(const std::string& backend) const;  // throws std::invalid_argument
  const std::vector<ShapeCase>& cases_for(const std::string& size_set) const;  // empty when not multi-shape
  // The task at one of its shapes: its own name "task@case", that case's sizes as `size_set`, no cases of its own.
  TaskSpec at_case(const ShapeCase& c, const std::string& size_set) const;
  Tolerance tolerance_for(DType t) const;
};

// Concrete shape of a tensor for the given sizes; throws std::invalid_argument on unknown symbols.
std::vector<int64_t> resolve_shape(const TensorSpec& t, const Sizes& sizes);
int64_t resolve_dim(const std::string& dim, const Sizes& sizes);
// Value of a product expression such as "2*M*N*K"; 0 for an empty expression.
double evaluate_product(const std::string& expr, const Sizes& sizes);
int64_t numel(const std::vector<int64_t>& shape);
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape);

}  // namespace crucible::eval
