// KernelBench's prompt composition, read from its prompts.toml: the option's components in order, each template
// block trimmed, the problem statement and instruction with the backend's display name, the example pair(s), and the
// problem's source, joined and filled as KernelBench's prompt constructor does.
#include "policy/kernelbench_prompt.h"

#include <fstream>
#include <map>
#include <tuple>
#include <sstream>
#include <toml++/toml.h>
#include <vector>

namespace crucible::policy {
namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw KernelBenchPromptError("cannot read " + path.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string trimmed(const std::string& s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1);
}

std::string text_at(const toml::table& root, const std::string& dotted, const fs::path& file) {
  auto node = root.at_path(dotted);
  if (!node.is_string()) throw KernelBenchPromptError(file.string() + ": no text at '" + dotted + "'");
  return std::string(*node.value<std::string>());
}

// A template block as KernelBench composes one: trimmed, with one newline after it.
std::string block(const toml::table& root, const std::string& dotted, const fs::path& file) {
  return trimmed(text_at(root, dotted, file)) + "\n";
}

// An example file named in prompts.toml ("src/kernelbench/prompts/model_ex_add.py"), found in the checkout or
// beside prompts.toml.
fs::path example_path(const std::string& named, const fs::path& toml_file) {
  const std::string prefix = "src/kernelbench/prompts/";
  const fs::path beside = toml_file.parent_path() / (named.rfind(prefix, 0) == 0 ? named.substr(prefix.size()) : named);
  return beside;
}

struct Composer {
  const toml::table& root;
  const fs::path& file;
  const KernelBenchPromptOptions& options;
  std::string display;

  std::string example_entry(const std::string& input, const std::string& output, const std::string& label) const {
    return format_named(trimmed(block(root, "templates.common.example_entry_template", file)),
                        {{"example_label", label}, {"input_code", input}, {"output_code", output},
                         {"backend_display", display}});
  }

  // The examples of the option: one pair (one_shot, or few_shot where the backend has none), or the backend's few.
  std::pair<std::string, std::string> examples(const std::string& kind) const {
    const std::string backend = "backends." + options.backend;
    auto intro = [&](const char* which) {
      return format_named(trimmed(block(root, std::string("templates.common.") + which, file)),
                          {{"backend_display", display}});
    };
    const auto* few = root.at_path(backend + ".few_shot_examples").as_array();
    if (kind == "few_shot" && few && !few->empty()) {
      std::vector<std::string> entries;
      for (std::size_t i = 0; i < few->size(); ++i) {
        const auto* pair = (*few)[i].as_array();
        if (!pair || pair->size() != 2) throw KernelBenchPromptError(file.string() + ": a few_shot_examples entry is not a pair");
        entries.push_back(example_entry(read_text(example_path(*(*pair)[0].value<std::string>(), file)),
                                        read_text(example_path(*(*pair)[1].value<std::string>(), file)),
                                        "Example " + std::to_string(i + 1) + ":"));
      }
      std::string joined;
      for (const auto& e : entries) joined += (joined.empty() ? "" : "\n\n") + e;
      return {intro("example_intro_few_shot"), trimmed(joined)};
    }
    auto arch = root.at_path(backend + ".few_shot_example_arch").value<std::string>();
    if (!arch) arch = root.at_path("shared.few_shot_example_arch").value<std::string>();
    if (!arch) throw KernelBenchPromptError(file.string() + ": no few_shot_example_arch");
    const std::string input = read_text(example_path(*arch, file));
    const std::string output = read_text(example_path(text_at(root, backend + ".one_shot_new_arch", file), file));
    return {intro("example_intro_one_shot"), trimmed(example_entry(input, output, "Example:"))};
  }
};

}  // namespace

std::string format_named(const std::string& text, const std::map<std::string, std::string>& fields) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if ((c == '{' || c == '}') && i + 1 < text.size() && text[i + 1] == c) {
      out += c;
      ++i;
    } else if (c == '{') {
      const auto close = text.find('}', i);
      if (close == std::string::npos) throw KernelBenchPromptError("a template has an unclosed '{'");
      const std::string name = text.substr(i + 1, close - i - 1);
      const auto it = fields.find(name);
      if (it == fields.end()) throw KernelBenchPromptError("a template names '{" + name + "}', which has no value");
      out += it->second;
      i = close;
    } else {
      out += c;
    }
  }
  return out;
}

fs::path kernelbench_prompts_toml(const fs::path& dir) {
  for (const fs::path candidate : {dir / "src" / "kernelbench" / "prompts" / "prompts.toml", dir / "prompts" / "prompts.toml",
                                   dir / "prompts.toml"})
    if (fs::is_regular_file(candidate)) return candidate;
  throw KernelBenchPromptError("no KernelBench prompts.toml under " + dir.string() +
                               " (name the KernelBench checkout: its src/kernelbench/prompts/prompts.toml)");
}

std::string kernelbench_prompt(const std::string& problem_source, const KernelBenchPromptOptions& options) {
  const fs::path file = kernelbench_prompts_toml(options.kernelbench_dir);
  toml::table root;
  try {
    root = toml::parse_file(file.string());
  } catch (const toml::parse_error& e) {
    throw KernelBenchPromptError(file.string() + ": " + std::string(e.description()));
  }
  const std::string backend = "backends." + options.backend;
  if (!root.at_path(backend).is_table()) throw KernelBenchPromptError(file.string() + ": no backend '" + options.backend + "'");
  const auto* option = root.at_path("options." + options.option).as_table();
  if (!option) throw KernelBenchPromptError(file.string() + ": no prompt option '" + options.option + "'");
  Composer composer{root, file, options, text_at(root, backend + ".backend_display", file)};
  std::map<std::string, std::string> context{{"ref_arch_src", problem_source}, {"backend_display", composer.display}};
  context["precision_display"] = text_at(root, "precision." + options.precision + ".precision_display", file);
  if (auto kind = (*option)["requires_example"].value<std::string>())
    std::tie(context["examples_intro"], context["examples_entries"]) = composer.examples(*kind);
  const auto* components = (*option)["components"].as_array();
  if (!components) throw KernelBenchPromptError(file.string() + ": option '" + options.option + "' has no components");
  std::vector<std::string> parts;
  for (const auto& node : *components) {
    const std::string name = node.value<std::string>().value_or("");
    if (name == "problem_statement" || name == "instruction")
      parts.push_back(format_named(text_at(root, "shared." + name, file), {{"backend_display", composer.display}}));
    else
      parts.push_back(block(root, (name.rfind("hardware_", 0) == 0 ? "templates.hardware." : "templates.common.") + name, file));
  }
  std::string joined;
  for (const auto& p : parts) joined += (joined.empty() ? "" : "\n") + p;
  return trimmed(format_named(trimmed(joined) + "\n", context)) + "\n";
}

}  // namespace crucible::policy
