#include "crucible/eval/cuda_split.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <cctype>
#include <string_view>
#include <vector>

namespace crucible::eval {
namespace {

constexpr std::size_t npos = std::string::npos;

enum class Kind { identifier, punct, literal, directive };
struct Token {
  Kind kind;
  std::size_t begin, end;
};

bool ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || static_cast<unsigned char>(c) >= 0x80; }
bool ident_char(char c) { return ident_start(c) || std::isdigit(static_cast<unsigned char>(c)); }

// The index just past a quoted literal that opens at i, or npos when it does not close on its line.
std::size_t skip_quoted(const std::string& s, std::size_t i) {
  const char quote = s[i];
  for (++i; i < s.size(); ++i) {
    if (s[i] == '\\') {
      ++i;
    } else if (s[i] == quote) {
      return i + 1;
    } else if (s[i] == '\n') {
      return npos;
    }
  }
  return npos;
}

// Comments vanish; string and character literals, numbers and whole preprocessor lines are single tokens, so
// nothing inside them is read as code. `<<<` and `>>>` are tokens of their own.
bool tokenize(const std::string& s, std::vector<Token>& out, std::string& error) {
  std::size_t i = 0;
  bool line_start = true;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '\n') {
      line_start = true;
      ++i;
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (s.compare(i, 2, "//") == 0) {
      i = s.find('\n', i);
      if (i == npos) i = s.size();
    } else if (s.compare(i, 2, "/*") == 0) {
      const std::size_t close = s.find("*/", i + 2);
      if (close == npos) return error = "an unterminated comment", false;
      i = close + 2;
    } else if (c == '#' && line_start) {
      std::size_t j = i;
      for (;;) {  // to the end of the line, across backslash continuations
        j = s.find('\n', j);
        if (j == npos) {
          j = s.size();
          break;
        }
        std::size_t k = j;
        while (k > i && (s[k - 1] == '\r' || s[k - 1] == ' ')) --k;
        if (k > i && s[k - 1] == '\\') {
          ++j;
          continue;
        }
        break;
      }
      out.push_back({Kind::directive, i, j});
      i = j;
    } else {
      line_start = false;
      std::size_t j = i + 1;
      Kind kind = Kind::punct;
      if (c == '"' || c == '\'') {
        j = skip_quoted(s, i);
        if (j == npos) return error = "an unterminated literal", false;
        kind = Kind::literal;
      } else if (ident_start(c)) {
        while (j < s.size() && ident_char(s[j])) ++j;
        const std::string_view word(s.data() + i, j - i);
        kind = Kind::identifier;
        if (j < s.size() && s[j] == '"' && (word == "R" || word == "u8R" || word == "uR" || word == "UR" || word == "LR")) {
          const std::size_t open = s.find('(', j);
          if (open == npos) return error = "an unterminated raw string", false;
          const std::string terminator = ")" + s.substr(j + 1, open - j - 1) + "\"";
          const std::size_t close = s.find(terminator, open);
          if (close == npos) return error = "an unterminated raw string", false;
          j = close + terminator.size();
          kind = Kind::literal;
        } else if (j < s.size() && (s[j] == '"' || s[j] == '\'') &&
                   (word == "u8" || word == "u" || word == "U" || word == "L")) {
          j = skip_quoted(s, j);
          if (j == npos) return error = "an unterminated literal", false;
          kind = Kind::literal;
        }
      } else if (std::isdigit(static_cast<unsigned char>(c)) ||
                 (c == '.' && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1])))) {
        while (j < s.size() &&
               (ident_char(s[j]) || s[j] == '.' || (s[j] == '\'' && j + 1 < s.size() && ident_char(s[j + 1])) ||
                ((s[j] == '+' || s[j] == '-') && std::strchr("eEpP", s[j - 1]) != nullptr)))
          ++j;
        kind = Kind::literal;
      } else if (s.compare(i, 3, "<<<") == 0 || s.compare(i, 3, ">>>") == 0) {
        j = i + 3;
      } else if (s.compare(i, 2, "::") == 0) {
        j = i + 2;
      }
      out.push_back({kind, i, j});
      i = j;
    }
  }
  return true;
}

struct Edit {
  std::size_t begin, end;
  std::string text;
};

// The source with the edits applied (they never overlap).
std::string apply(const std::string& s, std::vector<Edit> edits) {
  std::stable_sort(edits.begin(), edits.end(), [](const Edit& a, const Edit& b) { return a.begin < b.begin; });
  std::string out;
  std::size_t at = 0;
  for (const Edit& e : edits) {
    out.append(s, at, e.begin - at);
    out += e.text;
    at = e.end;
  }
  out.append(s, at, npos);
  return out;
}

// `text` followed by as many line breaks as the replaced range held: messages keep the candidate's line numbers.
std::string keeping_lines(const std::string& s, std::size_t begin, std::size_t end, const std::string& text) {
  return text + std::string(static_cast<std::size_t>(std::count(s.begin() + begin, s.begin() + end, '\n')), '\n');
}

// Headers that only host code needs: NVRTC has none of them, and the prelude below defines what kernels take
// from them. Kept for NVRTC: the toolkit's device headers (cuda_fp16.h, mma.h, cooperative_groups.h, ...).
bool host_only_header(std::string_view name) {
  static constexpr std::array kept{"cuda_fp16", "cuda_bf16", "cuda_fp8", "mma.h", "cooperative_groups", "cuda/", "cub/",
                                   "crt/", "sm_", "vector_types.h", "vector_functions.h"};
  if (name == "cuda.h" || name.rfind("cuda_runtime", 0) == 0) return true;
  for (const char* k : kept)
    if (name.rfind(k, 0) == 0) return false;
  return true;
}

// What the dropped host headers gave device code, spelled for NVRTC (int64_t is `long`, as g++ and nvcc mangle it).
constexpr const char* kNvrtcPrelude =
    "typedef signed char int8_t; typedef unsigned char uint8_t; typedef short int16_t; typedef unsigned short uint16_t;\n"
    "typedef int int32_t; typedef unsigned int uint32_t; typedef long int64_t; typedef unsigned long uint64_t;\n"
    "typedef long intptr_t; typedef unsigned long uintptr_t; typedef long ptrdiff_t;\n"
    "#define INFINITY __int_as_float(0x7f800000)\n#define NAN __int_as_float(0x7fffffff)\n#define HUGE_VALF INFINITY\n"
    "#define FLT_MAX 3.402823466e+38F\n#define FLT_MIN 1.175494351e-38F\n#define FLT_EPSILON 1.192092896e-07F\n"
    "#define DBL_MAX 1.7976931348623158e+308\n#define DBL_EPSILON 2.2204460492503131e-16\n"
    "#define INT_MAX 2147483647\n#define INT_MIN (-INT_MAX - 1)\n#define UINT_MAX 4294967295U\n"
    "#define INT64_MAX 9223372036854775807L\n#define INT32_MAX 2147483647\n"
    "#define M_PI 3.14159265358979323846\n#define M_PI_2 1.57079632679489661923\n#define M_E 2.7182818284590452354\n"
    "#define M_SQRT2 1.41421356237309504880\n#define M_SQRT1_2 0.70710678118654752440\n"
    "#define M_2_SQRTPI 1.12837916709551257390\n#define M_LN2 0.69314718055994530942\n"
    "#line 1 \"candidate.cu\"\n";

// Runtime calls that take a kernel's address: the host part translates these (crucible/fast_launch.h) ...
constexpr std::array kTranslatedKernelApis{"cudaLaunchKernel", "cudaFuncSetAttribute", "cudaFuncGetAttributes",
                                           "cudaOccupancyMaxActiveBlocksPerMultiprocessor"};
// ... and not these, nor anything naming device symbols from the host.
bool untranslated_kernel_api(std::string_view word) {
  if (std::find(kTranslatedKernelApis.begin(), kTranslatedKernelApis.end(), word) != kTranslatedKernelApis.end())
    return false;
  for (const char* prefix : {"cudaFunc", "cudaOccupancy", "cudaLaunch", "cudaGetKernel", "cudaGetFuncBySymbol"})
    if (word.rfind(prefix, 0) == 0) return true;
  return word.find("Symbol") != std::string_view::npos && word.rfind("cuda", 0) == 0;
}

class Splitter {
 public:
  explicit Splitter(const std::string& source) : s_(source) {}

  CudaSplit run() {
    CudaSplit out;
    std::string error;
    if (!tokenize(s_, t_, error)) {
      out.host_refusal = out.device_refusal = error;
      return out;
    }
    pair_brackets();
    scan_scope(0, t_.size(), 0, false);
    for (const Token& tok : t_)
      if (tok.kind == Kind::identifier && untranslated_kernel_api(text(tok)))
        refuse_host(std::string(text(tok)) + " takes a kernel or device symbol from host code");
    out.template_kernels = template_kernels_;
    out.host_refusal = host_refusal_;
    out.device_refusal = device_refusal_;
    if (out.host_ok())
      out.host = "#include <crucible/fast_launch.h>\n#line 1 \"candidate.cu\"\n" + apply(s_, host_edits_);
    if (out.device_ok()) out.device = kNvrtcPrelude + apply(s_, device_edits_);
    return out;
  }

 private:
  std::string_view text(const Token& t) const { return std::string_view(s_).substr(t.begin, t.end - t.begin); }
  bool is(std::size_t i, std::string_view what) const {
    return i < t_.size() && t_[i].kind != Kind::literal && t_[i].kind != Kind::directive && text(t_[i]) == what;
  }
  void refuse_host(const std::string& why) {
    if (host_refusal_.empty()) host_refusal_ = why;
  }
  void refuse_device(const std::string& why) {
    if (device_refusal_.empty()) device_refusal_ = why;
  }
  void refuse_both(const std::string& why) {
    refuse_host(why);
    refuse_device(why);
  }

  // The index of the bracket closing the one at i, or npos.
  std::size_t match(std::size_t i) const { return i < partner_.size() ? partner_[i] : npos; }
  // The index of the bracket opening the `)` or `]` at i, or npos.
  std::size_t match_back(std::size_t i) const { return match(i); }

  // Every bracket's partner, in one pass: a hostile source of deeply nested scopes would otherwise cost a scan to
  // the end per level. A bracket whose group holds a mismatch has none.
  void pair_brackets() {
    partner_.assign(t_.size(), npos);
    std::vector<std::size_t> open;
    for (std::size_t j = 0; j < t_.size(); ++j) {
      if (t_[j].kind != Kind::punct || t_[j].end - t_[j].begin != 1) continue;
      const char c = s_[t_[j].begin];
      if (c == '(' || c == '[' || c == '{') {
        open.push_back(j);
      } else if (c == ')' || c == ']' || c == '}') {
        if (open.empty()) continue;
        const char want = s_[t_[open.back()].begin] == '(' ? ')' : s_[t_[open.back()].begin] == '[' ? ']' : '}';
        if (want != c) {  // a mismatch: every group still open around it is unbalanced
          open.clear();
          continue;
        }
        partner_[j] = open.back();
        partner_[open.back()] = j;
        open.pop_back();
      }
    }
  }

  // Past the `>` closing a template parameter or argument list that opens at i.
  std::size_t skip_angles(std::size_t i) const {
    int depth = 0;
    for (std::size_t j = i; j < t_.size(); ++j) {
      if (is(j, "<")) ++depth;
      if (is(j, ">")) --depth;
      if (is(j, ">>>")) depth -= 3;
      if ((is(j, "(") || is(j, "[")) && (j = match(j)) == npos) return npos;
      if (depth <= 0) return j + 1;
    }
    return npos;
  }

  void directive(const Token& d) {
    const std::string_view line = text(d);
    if (line.find("<<<") != std::string_view::npos || line.find("__global__") != std::string_view::npos)
      refuse_both("a macro holds a kernel or a launch");
    std::size_t p = line.find_first_not_of(" \t", 1);
    if (p == std::string_view::npos || line.compare(p, 7, "include") != 0) return;
    p = line.find_first_of("<\"", p + 7);
    if (p == std::string_view::npos) return;
    const std::size_t close = line.find(line[p] == '<' ? '>' : '"', p + 1);
    if (close == std::string_view::npos) return;
    if (host_only_header(line.substr(p + 1, close - p - 1)))
      device_edits_.push_back({d.begin, d.end, keeping_lines(s_, d.begin, d.end, "")});
  }

  struct Declaration {
    bool global = false, device = false, host = false, memory = false, shared = false;
    bool templated = false, name_space = false, class_key = false, enumeration = false, linkage = false;
    bool params = false, initialiser = false;
  };

  // Declarations of a namespace, class or the file, tokens [i, end).
  void scan_scope(std::size_t i, std::size_t end, int depth, bool class_scope) {
    if (depth > kMaxScopeDepth) return refuse_both("namespaces or classes nested more than 64 deep");
    while (i < end) {
      if (t_[i].kind == Kind::directive) {
        directive(t_[i++]);
        continue;
      }
      if (is(i, ";")) {
        ++i;
        continue;
      }
      Declaration d;
      std::size_t j = i;
      for (; j < end; ++j) {
        const Token& tok = t_[j];
        if (tok.kind == Kind::directive) {
          directive(tok);
          continue;
        }
        if (tok.kind == Kind::literal) continue;
        const std::string_view w = text(tok);
        if (tok.kind == Kind::identifier) {
          if (w == "__global__") d.global = true;
          if (w == "__device__") d.device = true;
          if (w == "__host__") d.host = true;
          if (w == "__constant__" || w == "__managed__") d.memory = true;
          if (w == "__shared__") d.shared = true;
          if (w == "namespace") d.name_space = true;
          if (w == "struct" || w == "class" || w == "union") d.class_key = true;
          if (w == "enum") d.enumeration = true;
          if (w == "template" && is(j + 1, "<")) {
            d.templated = true;
            if ((j = skip_angles(j + 1)) == npos) return refuse_both("an unbalanced template parameter list");
            --j;
            continue;
          }
          static constexpr std::array not_params{"__launch_bounds__", "__attribute__", "alignas", "__align__",
                                                 "decltype", "noexcept", "sizeof", "alignof", "__declspec",
                                                 "static_assert", "__maxnreg__", "__cluster_dims__"};
          if (is(j + 1, "(") && std::find(not_params.begin(), not_params.end(), w) != not_params.end()) {
            if ((j = match(j + 1)) == npos) return refuse_both("unbalanced parentheses");
            continue;
          }
          continue;
        }
        if (w == "(" || w == "[") {
          if (w == "(" && !d.initialiser) d.params = true;
          if ((j = match(j)) == npos) return refuse_both("unbalanced brackets");
          continue;
        }
        if (w == "=" && !d.params) d.initialiser = true;
        if (w == "<<<") refuse_host("a launch outside a function body");
        if (w == ";" || w == "}") break;
        if (w == "{") {
          d.linkage = j >= 2 && t_[j - 1].kind == Kind::literal && is(j - 2, "extern");  // extern "C" { ... }
          if (d.name_space || d.linkage || (d.class_key && !d.enumeration && !d.params && !d.initialiser)) break;
          if (d.params && !d.initialiser && !d.enumeration) break;
          if ((j = match(j)) == npos) return refuse_both("unbalanced braces");  // an initialiser or an enum
        }
      }
      if (j >= end || is(j, "}")) return;  // the scope ends (a declaration without `;` is for the compilers to judge)
      if (is(j, ";")) {
        declaration(d, i, j, class_scope);
        i = j + 1;
        continue;
      }
      const std::size_t close = match(j);
      if (close == npos || close > end) return refuse_both("unbalanced braces");
      if (!d.params || d.initialiser || d.name_space || d.linkage) {  // a namespace, class or linkage block
        scan_scope(j + 1, close, depth + 1, class_scope || (d.class_key && !d.name_space && !d.linkage));
        i = close + 1;
        continue;
      }
      function(d, i, j, close);
      i = close + 1;
    }
  }

  // A declaration without a body, tokens [i, j] (`;` at j).
  void declaration(const Declaration& d, std::size_t i, std::size_t j, bool class_scope) {
    if (d.memory) refuse_host("__constant__ or __managed__ memory (the host part would need its symbol)");
    if (d.shared) refuse_host("a __shared__ variable outside a kernel");
    if (d.device && !d.params) refuse_host("a __device__ variable (the host part would need its symbol)");
    if (!class_scope && host_only_declaration(d, i, j))
      device_edits_.push_back({t_[i].begin, t_[j].end, keeping_lines(s_, t_[i].begin, t_[j].end, "")});
  }

  // Outside classes, what device code cannot use and NVRTC could not read without the host headers it lacks: a host
  // function's declaration (`torch::Tensor f(torch::Tensor x);`, a Python extension's C++ sources), and a namespace
  // of a host library brought in by name (`using namespace torch;`, `namespace py = pybind11;`). Tokens [i, j].
  bool host_only_declaration(const Declaration& d, std::size_t i, std::size_t j) const {
    for (std::size_t k = i; k < j; ++k)
      if (is(k, "constexpr") || is(k, "typedef") || is(k, "static_assert")) return false;
    if (d.params && !d.global && !d.device && !d.host && !d.initialiser && !d.class_key && !d.memory &&
        !is(i, "using") && !d.name_space)
      return true;
    if (!is(i, "using") && !(d.name_space && is(i, "namespace"))) return false;
    for (std::size_t k = i; k < j; ++k)
      for (const char* library : {"torch", "at", "c10", "pybind11"})
        if (is(k, library)) return true;
    return false;
  }

  // A function definition: declaration tokens [first, body), body [body, close].
  void function(const Declaration& d, std::size_t first, std::size_t body, std::size_t close) {
    const bool device_only = d.global || (d.device && !d.host);
    if (device_only) {
      host_edits_.push_back({t_[body].begin, t_[close].end, keeping_lines(s_, t_[body].begin, t_[close].end, ";")});
      if (d.global && d.templated) {
        std::size_t name = body;  // the identifier before the parameter list
        for (std::size_t k = first; k < body; ++k)
          if (is(k, "(") && k > first && t_[k - 1].kind == Kind::identifier && text(t_[k - 1]) != "__launch_bounds__") {
            name = k - 1;
            break;
          }
        if (name == body) refuse_device("a template kernel whose name it cannot read");
        else template_kernels_.emplace_back(text(t_[name]));
      }
      return;
    }
    bool launches = false;
    for (std::size_t k = body + 1; k < close; ++k) {
      if (t_[k].kind == Kind::directive) {
        directive(t_[k]);
        continue;
      }
      if (is(k, "<<<")) {
        launches = true;
        if (!d.device) k = launch(k, close);
        continue;
      }
      if (t_[k].kind == Kind::identifier) {
        const std::string_view w = text(t_[k]);
        if (w == "__device__" || w == "__global__" || w == "__shared__" || w == "__constant__")
          refuse_host("device code inside a host function (" + std::string(w) + ")");
      }
    }
    if (d.device) {  // __host__ __device__: both compilers take it as it is
      if (launches) refuse_both("a launch inside a __host__ __device__ function");
      return;
    }
    device_edits_.push_back({t_[first].begin, t_[close].end, keeping_lines(s_, t_[first].begin, t_[close].end, "")});
  }

  // Rewrites the launch whose `<<<` is token k; returns the index of its `>>>`.
  std::size_t launch(std::size_t k, std::size_t limit) {
    std::size_t p = k - 1;
    if (is(p, ">")) {  // template arguments: back to their `<`
      int depth = 0;
      for (;; --p) {
        if (is(p, ")") || is(p, "]")) p = match_back(p);  // a `>` inside parentheses is a comparison
        if (p == npos) return refuse_host("a launch it cannot read"), k;
        if (is(p, ">")) ++depth;
        if (is(p, "<")) --depth;
        if (depth == 0 || p == 0) break;
      }
      if (depth != 0 || p == 0) return refuse_host("a launch it cannot read"), k;
      --p;
    }
    if (t_[p].kind != Kind::identifier) return refuse_host("a launch of an expression it cannot read"), k;
    while (p >= 2 && is(p - 1, "::") && t_[p - 2].kind == Kind::identifier) p -= 2;
    if (p >= 1 && is(p - 1, "::")) --p;
    std::size_t q = k + 1;
    for (; q < limit && !is(q, ">>>"); ++q)
      if ((is(q, "(") || is(q, "[") || is(q, "{")) && (q = match(q)) == npos) break;
    if (q == npos || q >= limit) return refuse_host("a launch without its closing >>>"), k;
    host_edits_.push_back({t_[p].begin, t_[p].begin, "::crucible_fast::launch("});
    host_edits_.push_back({t_[k].begin, t_[k].end, ", "});
    host_edits_.push_back({t_[q].begin, t_[q].end, ")"});
    return q;
  }

  static constexpr int kMaxScopeDepth = 64;

  const std::string& s_;
  std::vector<Token> t_;
  std::vector<std::size_t> partner_;
  std::vector<Edit> host_edits_, device_edits_;
  std::string host_refusal_, device_refusal_;
  std::vector<std::string> template_kernels_;
};

}  // namespace

CudaSplit split_cuda_source(const std::string& source) { return Splitter(source).run(); }

std::string kernel_match_key(const std::string& mangled) {
  std::string out;
  std::size_t i = 0;
  while (i < mangled.size()) {
    if (!std::isdigit(static_cast<unsigned char>(mangled[i]))) {
      out.push_back(mangled[i++]);
      continue;
    }
    std::size_t j = i;
    while (j < mangled.size() && std::isdigit(static_cast<unsigned char>(mangled[j]))) ++j;
    const std::string digits = mangled.substr(i, j - i);
    const std::size_t length = digits.size() < 6 ? std::stoul(digits) : npos;
    if (mangled.compare(j, 11, "_GLOBAL__N_") == 0 && length != npos && j + length <= mangled.size()) {
      out += "@anon@";
      i = j + length;
    } else {
      out += digits;
      i = j;
    }
  }
  return out;
}

}  // namespace crucible::eval
