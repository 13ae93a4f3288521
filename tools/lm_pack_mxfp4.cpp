// lm_pack_mxfp4: a gpt-oss model directory with dense experts -> the same model with its experts in MXFP4, as the
// released checkpoints store them (lm/model/mxfp4_checkpoint.h). The GPU golden script packs its random models with
// it, and transformers' MXFP4 loader must read them as Crucible does.
//   lm_pack_mxfp4 --model IN_DIR --out OUT_DIR
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "lm/format/model_config.h"
#include "lm/format/model_files.h"
#include "lm/model/mxfp4_checkpoint.h"
#include "guarded_main.h"

namespace fs = std::filesystem;
using namespace crucible::lm;

namespace {

// config.json with quantization_config naming MXFP4 (what transformers reads to expect `_blocks` / `_scales`).
void write_config(const fs::path& in, const fs::path& out) {
  auto config = nlohmann::json::parse(std::ifstream(in / "config.json"));
  config["quantization_config"] = {{"quant_method", "mxfp4"}};
  std::ofstream(out / "config.json") << config.dump(2) << "\n";
}

// Everything but the weights and config.json: tokenizer and generation files travel unchanged.
void copy_other_files(const fs::path& in, const fs::path& out) {
  for (const auto& entry : fs::directory_iterator(in)) {
    const auto name = entry.path().filename().string();
    if (!entry.is_regular_file() || name == "config.json" || name.find(".safetensors") != std::string::npos) continue;
    fs::copy_file(entry.path(), out / name, fs::copy_options::overwrite_existing);
  }
}

}  // namespace

static int run_tool(int argc, char** argv) {
  CLI::App app("lm_pack_mxfp4: a gpt-oss model's experts packed into MXFP4 blocks and scales");
  std::string model_dir, out_dir;
  app.add_option("--model", model_dir, "Hugging Face model directory with dense experts")->required();
  app.add_option("--out", out_dir, "directory to write (created)")->required();
  CLI11_PARSE(app, argc, argv);
  const auto config = load_model_config(model_dir);
  const auto files = ModelFiles::open(model_dir);
  const auto tensors = mxfp4_checkpoint_tensors(config, files);
  fs::create_directories(out_dir);
  write_safetensors(fs::path(out_dir) / "model.safetensors", tensors, {{"format", "pt"}});
  write_config(model_dir, out_dir);
  copy_other_files(model_dir, out_dir);
  std::printf("%s: %zu tensors, experts in MXFP4\n", out_dir.c_str(), tensors.size());
  return 0;
}

int main(int argc, char** argv) {
  return crucible::tools::guarded_main("lm_pack_mxfp4", [&] { return run_tool(argc, argv); });
}
