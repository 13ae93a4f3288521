#pragma once
// Mutual proof of a shared secret between a coordinator and an evaluator node, without sending the secret. Each side
// sends a fresh nonce; each answers the other's nonce with HMAC-SHA256(secret, role, both nonces, node name). The
// role keeps a node from replaying the coordinator's own proof back to it; the fresh nonces keep anyone from
// replaying an old exchange. Plain functions over OpenSSL; the join protocol that uses them lives in the actors.
#include <filesystem>
#include <string>
#include <string_view>

namespace crucible::cluster {

enum class Role { coordinator, node };

// 32 random bytes from the OS's generator, hex-encoded.
std::string fresh_nonce();

// What `role` sends to prove the secret in the exchange named by both nonces and the joining node's name.
// `challenge` is the nonce the other side sent, `own_nonce` the one this side sent.
std::string join_proof(const std::string& secret, Role role, std::string_view challenge, std::string_view own_nonce,
                       std::string_view node_name);

// Compares two proofs in time independent of where they differ.
bool proofs_match(std::string_view expected, std::string_view received);

// The secret in a file: the first line, surrounding whitespace removed. Throws std::invalid_argument for a missing
// file, a secret under 16 characters, or a file that users other than its owner may read (the fix is chmod 600).
std::string read_secret_file(const std::filesystem::path& path);

}  // namespace crucible::cluster
