#include <stdexcept>

#include "openai_policy/openai_policy.h"

namespace crucible::policy {

std::unique_ptr<Policy> make_openai_policy(OpenAiPolicySetup) {
  throw std::invalid_argument("this build has no HTTP client (Debian's libcpp-httplib-dev was missing when it was built)");
}

std::unique_ptr<judge::Judge> make_llm_judge(const experiment::JudgeConfig&) {
  throw std::invalid_argument("this build has no HTTP client (Debian's libcpp-httplib-dev was missing when it was built)");
}

}  // namespace crucible::policy
