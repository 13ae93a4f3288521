// The shared-secret proof of a node join: it depends on every input, cannot be reflected between roles, compares
// in constant time, and the secret file is refused when others could read it.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <set>

#include "cluster/join_proof.h"
#include "support.h"

using namespace crucible;
using cluster::Role;

TEST_CASE("join proof: both sides compute the same proof, and every input changes it") {
  const std::string secret = "correct horse battery staple";
  const auto node_nonce = cluster::fresh_nonce(), coordinator_nonce = cluster::fresh_nonce();
  // The coordinator answers the node's nonce; the node checks it with the same inputs.
  const auto from_coordinator = cluster::join_proof(secret, Role::coordinator, node_nonce, coordinator_nonce, "gpu-a");
  CHECK(cluster::proofs_match(cluster::join_proof(secret, Role::coordinator, node_nonce, coordinator_nonce, "gpu-a"),
                              from_coordinator));
  CHECK(from_coordinator.size() == 64);  // HMAC-SHA256, hex

  std::set<std::string> variants{
      from_coordinator,
      cluster::join_proof(secret + "!", Role::coordinator, node_nonce, coordinator_nonce, "gpu-a"),
      cluster::join_proof(secret, Role::node, node_nonce, coordinator_nonce, "gpu-a"),  // no reflection
      cluster::join_proof(secret, Role::coordinator, coordinator_nonce, node_nonce, "gpu-a"),
      cluster::join_proof(secret, Role::coordinator, node_nonce, cluster::fresh_nonce(), "gpu-a"),
      cluster::join_proof(secret, Role::coordinator, node_nonce, coordinator_nonce, "gpu-b"),
  };
  CHECK(variants.size() == 6);
  // Field boundaries count: moving characters between the nonce and the name is another message.
  CHECK(cluster::join_proof(secret, Role::node, "ab", "c", "d") != cluster::join_proof(secret, Role::node, "a", "bc", "d"));
}

TEST_CASE("join proof: nonces are fresh, comparison needs equal, non-empty proofs") {
  std::set<std::string> nonces;
  for (int i = 0; i < 100; ++i) nonces.insert(cluster::fresh_nonce());
  CHECK(nonces.size() == 100);
  CHECK(nonces.begin()->size() == 64);
  CHECK(cluster::proofs_match("abc", "abc"));
  CHECK_FALSE(cluster::proofs_match("abc", "abd"));
  CHECK_FALSE(cluster::proofs_match("abc", "abcd"));
  CHECK_FALSE(cluster::proofs_match("", ""));
}

TEST_CASE("join proof: the secret file is its first line, and only its owner may read it") {
  test::ScratchDir dir("join-secret");
  const auto file = dir.path() / "secret";
  CHECK_THROWS_WITH_AS(cluster::read_secret_file(file), doctest::Contains("not a readable file"), std::invalid_argument);
  test::write_file(file, "  s3cret-value-of-some-length \nsecond line\n");
  ::chmod(file.c_str(), 0644);
  CHECK_THROWS_WITH_AS(cluster::read_secret_file(file), doctest::Contains("chmod 600"), std::invalid_argument);
  ::chmod(file.c_str(), 0600);
  CHECK(cluster::read_secret_file(file) == "s3cret-value-of-some-length");
  // Short enough to guess offline from one observed proof: refused.
  test::write_file(file, "hunter2\n");
  ::chmod(file.c_str(), 0600);
  CHECK_THROWS_WITH_AS(cluster::read_secret_file(file), doctest::Contains("at least 16"), std::invalid_argument);
  test::write_file(file, "\n");
  ::chmod(file.c_str(), 0600);
  CHECK_THROWS_WITH_AS(cluster::read_secret_file(file), doctest::Contains("empty"), std::invalid_argument);
}
