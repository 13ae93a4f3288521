// CPU row-reduction templates: softmax, log_softmax, layernorm, rmsnorm, sum_dim (one result per row of the last
// dimension) and mse_loss (one result for everything). What the knobs change:
//   lanes      independent accumulators per reduction (1 is a serial dependency chain; 4-16 let the compiler keep
//              them in vector registers without reassociating anything itself)
//   strategy   softmax: 0 max | sum of exp | write exp again; 1 max | write exp while summing | scale in place;
//              2 online max and rescaled sum in one pass | write. log_softmax: 0 max | sum; 1 online.
//   exp        0 the C library's expf; 1 an inline polynomial exp that vectorises (relative error ~1e-7)
//   stats      layernorm: 0 mean, then centred squares (two reads); 1 shifted sum and sum of squares in one read
//   row_block  rows reduced together (independent chains across rows; the tail of rows one at a time)
//   accumulate rmsnorm: 0 float, 1 double accumulators
//   chunk      mse_loss: elements summed in float before each partial joins a double total
#include "policy/templates/families.h"
#include "policy/templates/render_util.h"

namespace crucible::policy::templates {
namespace {

// The prelude every row-reduction source starts with: lane-parallel sum and max over R rows at once.
std::string prelude(int lanes, bool double_accumulators) {
  return std::string("#include <crucible/kernel.h>\n#include <cmath>\n#include <cstring>\n#include <type_traits>\n\n") +
         "typedef " + (double_accumulators ? "double" : "float") + " acc_t;\n"
         "constexpr int kLanes = " + num(lanes) + ";\n"
         "\n"
         "// out[r] = sum over j < n of f(r, j), for R rows at once, each row in kLanes independent accumulators.\n"
         "template <int R, class F>\n"
         "static inline void lane_sums(int64_t n, F f, acc_t* out) {\n"
         "  acc_t acc[R][kLanes] = {};\n"
         "  int64_t j = 0;\n"
         "  for (; j + kLanes <= n; j += kLanes)\n"
         "    for (int r = 0; r < R; ++r)\n"
         "#pragma GCC unroll 16\n"
         "      for (int u = 0; u < kLanes; ++u) acc[r][u] += f(r, j + u);\n"
         "  for (; j < n; ++j)\n"
         "    for (int r = 0; r < R; ++r) acc[r][0] += f(r, j);\n"
         "  for (int r = 0; r < R; ++r) {\n"
         "    acc_t s = 0;\n"
         "    for (int u = 0; u < kLanes; ++u) s += acc[r][u];\n"
         "    out[r] = s;\n"
         "  }\n"
         "}\n"
         "\n"
         "// sum[r] and sq[r]: sums of f(r, j) and of its square over j < n, in one pass.\n"
         "template <int R, class F>\n"
         "static inline void lane_sums_and_squares(int64_t n, F f, acc_t* sum, acc_t* sq) {\n"
         "  acc_t a[R][kLanes] = {}, q[R][kLanes] = {};\n"
         "  int64_t j = 0;\n"
         "  for (; j + kLanes <= n; j += kLanes)\n"
         "    for (int r = 0; r < R; ++r)\n"
         "#pragma GCC unroll 16\n"
         "      for (int u = 0; u < kLanes; ++u) {\n"
         "        const acc_t v = f(r, j + u);\n"
         "        a[r][u] += v;\n"
         "        q[r][u] += v * v;\n"
         "      }\n"
         "  for (; j < n; ++j)\n"
         "    for (int r = 0; r < R; ++r) {\n"
         "      const acc_t v = f(r, j);\n"
         "      a[r][0] += v;\n"
         "      q[r][0] += v * v;\n"
         "    }\n"
         "  for (int r = 0; r < R; ++r) {\n"
         "    acc_t s = 0, t = 0;\n"
         "    for (int u = 0; u < kLanes; ++u) { s += a[r][u]; t += q[r][u]; }\n"
         "    sum[r] = s;\n"
         "    sq[r] = t;\n"
         "  }\n"
         "}\n"
         "\n"
         "// The largest of p[0..n), n >= 1.\n"
         "static inline float lane_max(const float* p, int64_t n) {\n"
         "  float m[kLanes];\n"
         "  for (int u = 0; u < kLanes; ++u) m[u] = p[0];\n"
         "  int64_t j = 0;\n"
         "  for (; j + kLanes <= n; j += kLanes)\n"
         "#pragma GCC unroll 16\n"
         "    for (int u = 0; u < kLanes; ++u) m[u] = p[j + u] > m[u] ? p[j + u] : m[u];\n"
         "  for (; j < n; ++j) m[0] = p[j] > m[0] ? p[j] : m[0];\n"
         "  float best = m[0];\n"
         "  for (int u = 1; u < kLanes; ++u) best = m[u] > best ? m[u] : best;\n"
         "  return best;\n"
         "}\n\n";
}

// exp for the softmax family: expf, or a branch-free polynomial (Cody-Waite reduction by ln 2, degree-7 Taylor
// on |r| <= ln2/2, scale by 2^n built in the exponent bits) that the compiler can vectorise.
std::string exp_function(int kind) {
  if (kind == 0) return "static inline float exp_(float x) { return std::exp(x); }\n\n";
  return "static inline float exp_(float x) {\n"
         "  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);\n"
         "  const float n = std::floor(x * 1.44269504089f + 0.5f);\n"
         "  const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-06f;\n"
         "  float p = 1.0f / 5040.0f;\n"
         "  p = p * r + 1.0f / 720.0f;\n  p = p * r + 1.0f / 120.0f;\n  p = p * r + 1.0f / 24.0f;\n"
         "  p = p * r + 1.0f / 6.0f;\n  p = p * r + 0.5f;\n  p = p * r + 1.0f;\n  p = p * r + 1.0f;\n"
         "  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;\n"
         "  float scale;\n  std::memcpy(&scale, &bits, sizeof scale);\n"
         "  return p * scale;\n"
         "}\n\n";
}

// Online max and rescaled sum of exp over one row, in kLanes independent (max, sum) pairs; sets m and s.
const char* kOnline =
    "static inline void online_max_sum(const float* x, int64_t n, float& m_out, float& s_out) {\n"
    "  float m[kLanes], s[kLanes];\n"
    "  for (int u = 0; u < kLanes; ++u) { m[u] = -INFINITY; s[u] = 0.0f; }\n"
    "  int64_t j = 0;\n"
    "  for (; j + kLanes <= n; j += kLanes)\n"
    "#pragma GCC unroll 16\n"
    "    for (int u = 0; u < kLanes; ++u) {\n"
    "      const float v = x[j + u], mn = v > m[u] ? v : m[u];\n"
    "      s[u] = s[u] * exp_(m[u] - mn) + exp_(v - mn);\n"
    "      m[u] = mn;\n"
    "    }\n"
    "  for (; j < n; ++j) {\n"
    "    const float v = x[j], mn = v > m[0] ? v : m[0];\n"
    "    s[0] = s[0] * exp_(m[0] - mn) + exp_(v - mn);\n"
    "    m[0] = mn;\n"
    "  }\n"
    "  float best = m[0];\n"
    "  for (int u = 1; u < kLanes; ++u) best = m[u] > best ? m[u] : best;\n"
    "  float total = 0.0f;\n"
    "  for (int u = 0; u < kLanes; ++u)\n"
    "    if (m[u] != -INFINITY) total += s[u] * exp_(m[u] - best);\n"
    "  m_out = best;\n  s_out = total;\n"
    "}\n\n";

const char* kEntryRows =
    "CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void*) {\n"
    "  const int32_t nd = in[0].ndim;\n"
    "  const int64_t n = nd > 0 ? in[0].shape[nd - 1] : 1;\n"
    "  int64_t rows = 1;\n"
    "  for (int32_t d = 0; d + 1 < nd; ++d) rows *= in[0].shape[d];\n"
    "  if (n <= 0) return 0;\n";

// The loop over rows of one float input and one float output, opened for the row's body.
const char* kRowLoop =
    "  const float* x = static_cast<const float*>(in[0].data);\n"
    "  float* y = static_cast<float*>(out[0].data);\n"
    "  for (int64_t i = 0; i < rows; ++i) {\n"
    "    const float* xr = x + i * n;\n"
    "    float* yr = y + i * n;\n";

std::string softmax(const eval::TaskSpec&, const std::vector<int>& v) {
  const int lanes = v[0], strategy = v[1], exp_kind = v[2];
  std::string s = banner("softmax (cpu)", {"lanes", "strategy", "exp"}, v) + prelude(lanes, false) +
                  exp_function(exp_kind) + (strategy == 2 ? kOnline : "") + kEntryRows + kRowLoop;
  if (strategy == 0)
    s += "    const float m = lane_max(xr, n);\n"
         "    acc_t sum;\n"
         "    lane_sums<1>(n, [&](int, int64_t j) { return exp_(xr[j] - m); }, &sum);\n"
         "    const float inv = 1.0f / static_cast<float>(sum);\n"
         "    for (int64_t j = 0; j < n; ++j) yr[j] = exp_(xr[j] - m) * inv;\n";
  else if (strategy == 1)
    s += "    const float m = lane_max(xr, n);\n"
         "    acc_t sum;\n"
         "    lane_sums<1>(n, [&](int, int64_t j) { const float e = exp_(xr[j] - m); yr[j] = e; return e; }, &sum);\n"
         "    const float inv = 1.0f / static_cast<float>(sum);\n"
         "    for (int64_t j = 0; j < n; ++j) yr[j] *= inv;\n";
  else
    s += "    float m, sum;\n"
         "    online_max_sum(xr, n, m, sum);\n"
         "    const float inv = 1.0f / sum;\n"
         "    for (int64_t j = 0; j < n; ++j) yr[j] = exp_(xr[j] - m) * inv;\n";
  return s + "  }\n  return 0;\n}\n";
}

std::string log_softmax(const eval::TaskSpec&, const std::vector<int>& v) {
  const int lanes = v[0], strategy = v[1], exp_kind = v[2];
  std::string s = banner("log_softmax (cpu)", {"lanes", "strategy", "exp"}, v) + prelude(lanes, false) +
                  exp_function(exp_kind) + (strategy == 1 ? kOnline : "") + kEntryRows + kRowLoop;
  if (strategy == 0)
    s += "    const float m = lane_max(xr, n);\n"
         "    acc_t sum;\n"
         "    lane_sums<1>(n, [&](int, int64_t j) { return exp_(xr[j] - m); }, &sum);\n";
  else
    s += "    float m, sum;\n"
         "    online_max_sum(xr, n, m, sum);\n";
  s += "    const float lse = m + static_cast<float>(std::log(static_cast<double>(sum)));\n"
       "    for (int64_t j = 0; j < n; ++j) yr[j] = xr[j] - lse;\n";
  return s + "  }\n  return 0;\n}\n";
}

// The row loop shared by the norms and sum_dim: full blocks of kRowBlock rows through block<kRowBlock>, the rest
// one row at a time through block<1>.
std::string row_blocks(int row_block) {
  return "  constexpr int kRowBlock = " + num(row_block) + ";\n"
         "  int64_t i = 0;\n"
         "  for (; i + kRowBlock <= rows; i += kRowBlock) block(std::integral_constant<int, kRowBlock>{}, i);\n"
         "  for (; i < rows; ++i) block(std::integral_constant<int, 1>{}, i);\n"
         "  return 0;\n}\n";
}

// The head of the per-block lambda: R row pointers of x from row i0.
const char* kBlockHead =
    "  auto block = [&](auto rows_tag, int64_t i0) {\n"
    "    constexpr int R = decltype(rows_tag)::value;\n"
    "    const float* xr[R];\n"
    "    for (int r = 0; r < R; ++r) xr[r] = x + (i0 + r) * n;\n";

std::string layernorm(const eval::TaskSpec& task, const std::vector<int>& v) {
  const int lanes = v[0], stats = v[1], row_block = v[2];
  std::string s = banner("layernorm (cpu)", {"lanes", "stats", "row_block"}, v) + prelude(lanes, false) + kEntryRows +
                  "  const float* x = static_cast<const float*>(in[0].data);\n"
                  "  const float* w = static_cast<const float*>(in[1].data);\n"
                  "  const float* b = static_cast<const float*>(in[2].data);\n"
                  "  float* y = static_cast<float*>(out[0].data);\n"
                  "  const float eps = " + float_literal(param(task, "eps", 1e-5)) + ";\n"
                  "  const float inv_n = 1.0f / static_cast<float>(n);\n" +
                  kBlockHead + "    float mean[R], inv[R];\n";
  if (stats == 0)
    s += "    acc_t sum[R], sq[R];\n"
         "    lane_sums<R>(n, [&](int r, int64_t j) { return xr[r][j]; }, sum);\n"
         "    for (int r = 0; r < R; ++r) mean[r] = static_cast<float>(sum[r]) * inv_n;\n"
         "    lane_sums<R>(n, [&](int r, int64_t j) { const float d = xr[r][j] - mean[r]; return d * d; }, sq);\n"
         "    for (int r = 0; r < R; ++r) inv[r] = 1.0f / std::sqrt(static_cast<float>(sq[r]) * inv_n + eps);\n";
  else
    // Shifted by each row's first element so that the sum of squares does not cancel against a large mean.
    s += "    float shift[R];\n"
         "    for (int r = 0; r < R; ++r) shift[r] = xr[r][0];\n"
         "    acc_t sum[R], sq[R];\n"
         "    lane_sums_and_squares<R>(n, [&](int r, int64_t j) { return xr[r][j] - shift[r]; }, sum, sq);\n"
         "    for (int r = 0; r < R; ++r) {\n"
         "      const float m = static_cast<float>(sum[r]) * inv_n;\n"
         "      float var = static_cast<float>(sq[r]) * inv_n - m * m;\n"
         "      var = var > 0.0f ? var : 0.0f;\n"
         "      mean[r] = shift[r] + m;\n"
         "      inv[r] = 1.0f / std::sqrt(var + eps);\n"
         "    }\n";
  s += "    for (int r = 0; r < R; ++r) {\n"
       "      float* yr = y + (i0 + r) * n;\n"
       "      for (int64_t j = 0; j < n; ++j) yr[j] = (xr[r][j] - mean[r]) * inv[r] * w[j] + b[j];\n"
       "    }\n"
       "  };\n";
  return s + row_blocks(row_block);
}

std::string rmsnorm(const eval::TaskSpec& task, const std::vector<int>& v) {
  const int lanes = v[0], row_block = v[1], accumulate = v[2];
  return banner("rmsnorm (cpu)", {"lanes", "row_block", "accumulate"}, v) + prelude(lanes, accumulate == 1) +
         kEntryRows +
         "  const float* x = static_cast<const float*>(in[0].data);\n"
         "  const float* w = static_cast<const float*>(in[1].data);\n"
         "  float* y = static_cast<float*>(out[0].data);\n"
         "  const acc_t eps = " + float_literal(param(task, "eps", 1e-6)) + ";\n" + kBlockHead +
         "    acc_t sq[R];\n"
         "    lane_sums<R>(n, [&](int r, int64_t j) { const acc_t e = xr[r][j]; return e * e; }, sq);\n"
         "    for (int r = 0; r < R; ++r) {\n"
         "      const float inv = static_cast<float>(1 / std::sqrt(sq[r] / static_cast<acc_t>(n) + eps));\n"
         "      float* yr = y + (i0 + r) * n;\n"
         "      for (int64_t j = 0; j < n; ++j) yr[j] = xr[r][j] * inv * w[j];\n"
         "    }\n"
         "  };\n" +
         row_blocks(row_block);
}

std::string sum_dim(const eval::TaskSpec&, const std::vector<int>& v) {
  const int lanes = v[0], row_block = v[1];
  return banner("sum_dim (cpu)", {"lanes", "row_block"}, v) + prelude(lanes, false) + kEntryRows +
         "  const float* x = static_cast<const float*>(in[0].data);\n"
         "  float* y = static_cast<float*>(out[0].data);\n" + kBlockHead +
         "    acc_t sum[R];\n"
         "    lane_sums<R>(n, [&](int r, int64_t j) { return xr[r][j]; }, sum);\n"
         "    for (int r = 0; r < R; ++r) y[i0 + r] = static_cast<float>(sum[r]);\n"
         "  };\n" +
         row_blocks(row_block);
}

std::string mse_loss(const eval::TaskSpec&, const std::vector<int>& v) {
  const int lanes = v[0], chunk = v[1];
  return banner("mse_loss (cpu)", {"lanes", "chunk"}, v) + prelude(lanes, false) +
         "CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void*) {\n"
         "  const float* p = static_cast<const float*>(in[0].data);\n"
         "  const float* t = static_cast<const float*>(in[1].data);\n"
         "  int64_t n = 1;\n"
         "  for (int32_t d = 0; d < in[0].ndim; ++d) n *= in[0].shape[d];\n"
         "  constexpr int64_t kChunk = " + num(chunk) + ";\n"
         "  double total = 0.0;\n"
         "  for (int64_t c = 0; c < n; c += kChunk) {\n"
         "    const int64_t len = n - c < kChunk ? n - c : kChunk;\n"
         "    const float* pc = p + c;\n"
         "    const float* tc = t + c;\n"
         "    acc_t part;\n"
         "    lane_sums<1>(len, [&](int, int64_t j) { const float d = pc[j] - tc[j]; return d * d; }, &part);\n"
         "    total += part;\n"
         "  }\n"
         "  *static_cast<float*>(out[0].data) = n > 0 ? static_cast<float>(total / static_cast<double>(n)) : NAN;\n"
         "  return 0;\n}\n";
}

const std::vector<int> kLaneChoices{1, 4, 8, 16};
const KernelTemplate kSoftmax{"softmax", {{"lanes", kLaneChoices}, {"strategy", {0, 1, 2}}, {"exp", {0, 1}}}, softmax};
const KernelTemplate kLogSoftmax{
    "log_softmax", {{"lanes", kLaneChoices}, {"strategy", {0, 1}}, {"exp", {0, 1}}}, log_softmax};
const KernelTemplate kLayernorm{
    "layernorm", {{"lanes", kLaneChoices}, {"stats", {0, 1}}, {"row_block", {1, 2, 4}}}, layernorm};
const KernelTemplate kRmsnorm{
    "rmsnorm", {{"lanes", kLaneChoices}, {"row_block", {1, 2, 4}}, {"accumulate", {0, 1}}}, rmsnorm};
const KernelTemplate kSumDim{"sum_dim", {{"lanes", kLaneChoices}, {"row_block", {1, 2, 4, 8}}}, sum_dim};
const KernelTemplate kMseLoss{"mse_loss", {{"lanes", kLaneChoices}, {"chunk", {256, 4096, 65536}}}, mse_loss};

}  // namespace

std::vector<const KernelTemplate*> row_reduction_cpu() {
  return {&kSoftmax, &kLogSoftmax, &kLayernorm, &kRmsnorm, &kSumDim, &kMseLoss};
}

}  // namespace crucible::policy::templates
