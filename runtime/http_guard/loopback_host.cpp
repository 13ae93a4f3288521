#include "http_guard/loopback_host.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cctype>
#include <cstring>

namespace crucible::http_guard {

namespace {

bool equals_ignoring_case(const std::string& a, const std::string& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

bool is_loopback_ipv4(const std::string& text) {
  in_addr a{};
  if (inet_pton(AF_INET, text.c_str(), &a) != 1) return false;
  return (ntohl(a.s_addr) >> 24) == 127;
}

bool is_loopback_ipv6(const std::string& text) {
  in6_addr a{};
  if (inet_pton(AF_INET6, text.c_str(), &a) != 1) return false;
  if (IN6_IS_ADDR_LOOPBACK(&a)) return true;
  return IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127;
}

bool is_port(const std::string& text) {
  return !text.empty() && text.size() <= 5 && text.find_first_not_of("0123456789") == std::string::npos;
}

}  // namespace

bool is_loopback_host(const std::string& host) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    return is_loopback_ipv6(host.substr(1, host.size() - 2));
  return equals_ignoring_case(host, "localhost") || is_loopback_ipv4(host) || is_loopback_ipv6(host);
}

std::optional<std::string> host_of_host_header(const std::string& value) {
  if (value.empty()) return std::nullopt;
  if (value.front() == '[') {
    const auto close = value.find(']');
    if (close == std::string::npos || close == 1) return std::nullopt;
    const std::string rest = value.substr(close + 1);
    if (!rest.empty() && (rest.front() != ':' || !is_port(rest.substr(1)))) return std::nullopt;
    return value.substr(1, close - 1);
  }
  const auto colon = value.find(':');
  if (colon == std::string::npos) return value;
  // A second colon: an IPv6 literal without brackets, which a Host header may not carry.
  if (colon == 0 || value.find(':', colon + 1) != std::string::npos || !is_port(value.substr(colon + 1)))
    return std::nullopt;
  return value.substr(0, colon);
}

bool is_loopback_host_header(const std::string& value) {
  const auto host = host_of_host_header(value);
  if (!host) return false;
  // Bracketed only: an IPv6 literal; a bare name or IPv4 literal otherwise.
  if (value.front() == '[') return is_loopback_host("[" + *host + "]");
  return host->find(':') == std::string::npos && is_loopback_host(*host);
}

}  // namespace crucible::http_guard
