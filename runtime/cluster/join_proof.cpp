#include "cluster/join_proof.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <fstream>
#include <stdexcept>

namespace crucible::cluster {
namespace fs = std::filesystem;

namespace {

std::string hex(const unsigned char* data, std::size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (std::size_t i = 0; i < n; ++i) out[2 * i] = digits[data[i] >> 4], out[2 * i + 1] = digits[data[i] & 15];
  return out;
}

// Fields joined with their lengths, so no two different field lists give the same message.
void append_field(std::string& message, std::string_view field) {
  message += std::to_string(field.size());
  message += ':';
  message += field;
}

}  // namespace

std::string fresh_nonce() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof bytes) != 1) throw std::runtime_error("the OS random generator failed");
  return hex(bytes, sizeof bytes);
}

std::string join_proof(const std::string& secret, Role role, std::string_view challenge, std::string_view own_nonce,
                       std::string_view node_name) {
  std::string message = "crucible-join-v1";
  append_field(message, role == Role::coordinator ? "coordinator" : "node");
  append_field(message, challenge);
  append_field(message, own_nonce);
  append_field(message, node_name);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (!HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
            reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &length))
    throw std::runtime_error("HMAC-SHA256 failed");
  return hex(mac, length);
}

bool proofs_match(std::string_view expected, std::string_view received) {
  if (expected.size() != received.size() || expected.empty()) return false;
  return CRYPTO_memcmp(expected.data(), received.data(), expected.size()) == 0;
}

std::string read_secret_file(const fs::path& path) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (ec || !fs::is_regular_file(status)) throw std::invalid_argument("secret file " + path.string() + ": not a readable file");
  const auto others = fs::perms::group_read | fs::perms::group_write | fs::perms::others_read | fs::perms::others_write;
  if ((status.permissions() & others) != fs::perms::none)
    throw std::invalid_argument("secret file " + path.string() + ": readable by users other than its owner (chmod 600 it)");
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  const auto first = line.find_first_not_of(" \t\r");
  const auto last = line.find_last_not_of(" \t\r");
  if (first == std::string::npos) throw std::invalid_argument("secret file " + path.string() + ": empty");
  std::string secret = line.substr(first, last - first + 1);
  // A proof seen on the wire lets anyone test guesses offline: only a long random secret makes that hopeless.
  if (secret.size() < 16)
    throw std::invalid_argument("secret file " + path.string() + ": use at least 16 characters (openssl rand -hex 32)");
  return secret;
}

}  // namespace crucible::cluster
