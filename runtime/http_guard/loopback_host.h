#pragma once
// Whether a host names this machine's loopback interface, decided on parsed addresses and exact names only: a
// prefix test would let `127.evil.example` (a name anyone may register and point anywhere) pass for loopback.
// Used twice: a server bound to loopback may go without a token, and a tokenless server answers only requests whose
// Host header names loopback (a web page that rebinds its own name to 127.0.0.1 still sends that name).
#include <optional>
#include <string>

namespace crucible::http_guard {

// A bare host: an IPv4 literal in 127.0.0.0/8, the IPv6 literal ::1 (or ::ffff:127.x.y.z), optionally in brackets,
// or the name `localhost` (any case). Anything else, names that merely start with "127." included, is not.
bool is_loopback_host(const std::string& host);

// The host part of a Host header value (`name`, `name:port`, `[v6]`, `[v6]:port`), brackets removed; nothing when
// the value is malformed (empty, a port that is not 1-5 digits, an unclosed bracket, an unbracketed IPv6 literal).
std::optional<std::string> host_of_host_header(const std::string& value);

// A Host header value that names loopback (see is_loopback_host); false when it is malformed.
bool is_loopback_host_header(const std::string& value);

}  // namespace crucible::http_guard
