// A device parsed once from its text, by one parser.
#include <doctest/doctest.h>

#include "crucible/eval/device.h"
#include "crucible/eval/eval_settings.h"

using namespace crucible::eval;

TEST_CASE("devices parse from their names and print back the same") {
  struct Row {
    const char* text;
    bool bare_cuda;
    bool ok;
    Device device;
  };
  const Row rows[] = {
      {"cpu", false, true, Device::cpu()},
      {"cuda:0", false, true, Device::cuda(0)},
      {"cuda:12", false, true, Device::cuda(12)},
      {"cuda", true, true, Device::cuda(0)},  // the eval CLI's shorthand
      {"cuda", false, false, {}},
      {"cuda:", false, false, {}},
      {"cuda:-1", false, false, {}},
      {"cuda:1x", false, false, {}},
      {"cuda:99999999", false, false, {}},
      {"gpu:0", false, false, {}},
      {"CPU", false, false, {}},
      {"", false, false, {}},
  };
  for (const auto& row : rows) {
    CAPTURE(row.text);
    if (row.ok) {
      const Device d = parse_device(row.text, row.bare_cuda);
      CHECK(d == row.device);
      if (std::string(row.text) != "cuda") CHECK(d.name() == row.text);
    } else {
      CHECK_THROWS_AS(parse_device(row.text, row.bare_cuda), std::invalid_argument);
    }
  }
}

TEST_CASE("backends and evaluation modes parse strictly") {
  CHECK(parse_backend("cpu") == Backend::cpu);
  CHECK(parse_backend("cuda") == Backend::cuda);
  CHECK_THROWS_AS(parse_backend("gpu"), std::invalid_argument);
  CHECK(source_extension(Backend::cuda) == "cu");
  CHECK(parse_mode("full") == Mode::full);
  CHECK_THROWS_AS(parse_mode("Full"), std::invalid_argument);
  for (Launches l : {Launches::eager, Launches::queued}) CHECK(parse_launches(launches_name(l)) == l);
  CHECK_THROWS_AS(parse_launches("held"), std::invalid_argument);
  EvalSettings s;
  CHECK(s.launches == Launches::eager);
  CHECK(s.size_set() == "cpu");
  s.backend = Backend::cuda;
  CHECK(s.size_set() == "cuda");
  s.sizes = "cpu";
  CHECK(s.size_set() == "cpu");
}
