#include "http_guard/body_policy.h"

#include <algorithm>
#include <cctype>

namespace crucible::http_guard {

namespace {

bool is_identity(std::string value) {
  std::transform(value.begin(), value.end(), value.begin(), [](unsigned char c) { return std::tolower(c); });
  const auto first = value.find_first_not_of(" \t");
  const auto last = value.find_last_not_of(" \t");
  return first != std::string::npos && value.substr(first, last - first + 1) == "identity";
}

bool plain_decimal(const std::string& text) {
  return !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
}

}  // namespace

BodyVerdict check_body(const BodyHeaders& head, std::size_t max_bytes) {
  if (!head.transfer_encoding.empty())
    return {411, "a streamed (Transfer-Encoding) request body is not taken: send Content-Length"};
  for (const auto& e : head.content_encoding)
    if (!is_identity(e)) return {415, "a compressed request body is not taken"};
  if (head.content_length.empty()) {
    const bool body_expected = head.method == "POST" || head.method == "PUT" || head.method == "PATCH" ||
                               head.method == "PRI";
    if (body_expected) return {411, "a " + head.method + " needs Content-Length"};
    return {};
  }
  if (head.content_length.size() > 1) return {400, "more than one Content-Length"};
  const std::string& length = head.content_length.front();
  if (!plain_decimal(length)) return {400, "Content-Length is not a decimal number"};
  // Past 19 digits the number may not fit 64 bits, and is over any limit anyway.
  if (length.size() > 19 || std::stoull(length) > max_bytes)
    return {413, "request body over " + std::to_string(max_bytes) + " bytes"};
  return {};
}

}  // namespace crucible::http_guard
