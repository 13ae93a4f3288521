// What an HTTP server lets a client make it hold (runtime/http_guard): loopback hosts by parsed address, request
// bodies judged from their head, connections counted per client and in all, and a real server on loopback that
// answers over its limits at once.
#include <doctest/doctest.h>
#include <httplib.h>

#include <memory>
#include <thread>

#include "http_guard/body_policy.h"
#include "http_guard/connection_limits.h"
#include "http_guard/guarded_server.h"
#include "http_guard/loopback_host.h"
#include "process_support.h"
#include "tools/loopback_socket.h"

using namespace crucible;
using namespace crucible::http_guard;

TEST_CASE("http guard: the host of a Host header, and whether it names loopback") {
  struct Case {
    std::string value;
    std::optional<std::string> host;
    bool loopback;
  };
  const std::vector<Case> cases{
      {"127.0.0.1", "127.0.0.1", true},
      {"127.0.0.1:80", "127.0.0.1", true},
      {"localhost:65535", "localhost", true},
      {"[::1]:8080", "::1", true},
      {"[::1]", "::1", true},
      {"[::ffff:127.0.0.2]:1", "::ffff:127.0.0.2", true},
      {"127.evil.example", "127.evil.example", false},
      {"127.0.0.1.attacker.example:80", "127.0.0.1.attacker.example", false},
      {"[127.0.0.1]", "127.0.0.1", false},  // brackets hold IPv6 literals only
      {"[::2]:80", "::2", false},
      {"", std::nullopt, false},
      {":80", std::nullopt, false},
      {"::1", std::nullopt, false},  // an IPv6 literal must be bracketed
      {"[::1", std::nullopt, false},
      {"[]:80", std::nullopt, false},
      {"[::1]80", std::nullopt, false},
      {"localhost:", std::nullopt, false},
      {"localhost:123456", std::nullopt, false},
      {"localhost:8o", std::nullopt, false},
  };
  for (const auto& c : cases) {
    INFO("Host: " << c.value);
    CHECK(host_of_host_header(c.value) == c.host);
    CHECK(is_loopback_host_header(c.value) == c.loopback);
  }
}

TEST_CASE("http guard: a request body is judged from the head alone") {
  struct Case {
    BodyHeaders head;
    int status;
  };
  const std::vector<Case> cases{
      {{"GET", {}, {}, {}}, 0},
      {{"DELETE", {}, {}, {}}, 0},
      {{"POST", {"0"}, {}, {}}, 0},
      {{"POST", {"1024"}, {}, {}}, 0},
      {{"POST", {"1025"}, {}, {}}, 413},
      {{"GET", {"1025"}, {}, {}}, 413},
      {{"POST", {"18446744073709551616"}, {}, {}}, 413},  // past 64 bits
      {{"POST", {"00000000000000000000001"}, {}, {}}, 413},
      {{"POST", {}, {}, {}}, 411},  // read until the client closes, otherwise
      {{"PUT", {}, {}, {}}, 411},
      {{"PATCH", {}, {}, {}}, 411},
      {{"POST", {}, {"chunked"}, {}}, 411},
      {{"GET", {}, {"gzip, chunked"}, {}}, 411},
      {{"POST", {"10", "10"}, {}, {}}, 400},
      {{"POST", {"-1"}, {}, {}}, 400},
      {{"POST", {"1e3"}, {}, {}}, 400},
      {{"POST", {""}, {}, {}}, 400},
      {{"POST", {"10"}, {}, {"gzip"}}, 415},
      {{"POST", {"10"}, {}, {"br"}}, 415},
      {{"POST", {"10"}, {}, {"Identity"}}, 0},
  };
  for (const auto& c : cases) {
    INFO(c.head.method << " length " << (c.head.content_length.empty() ? "-" : c.head.content_length.front()));
    const BodyVerdict v = check_body(c.head, 1024);
    CHECK(v.status == c.status);
    CHECK(v.allowed() == (c.status == 0));
    CHECK(v.reason.empty() == (c.status == 0));
  }
}

TEST_CASE("http guard: connections are counted per client and in all") {
  ConnectionCounter counter({/*max_connections=*/3, /*max_per_client=*/2});
  CHECK(counter.try_admit("a"));
  CHECK(counter.try_admit("a"));
  CHECK_FALSE(counter.try_admit("a"));  // a's own limit
  CHECK(counter.held_by("a") == 2);
  CHECK(counter.try_admit("b"));
  CHECK_FALSE(counter.try_admit("c"));  // all in all
  CHECK(counter.held_by("c") == 0);
  CHECK(counter.held() == 3);
  counter.release("a");
  CHECK(counter.try_admit("c"));
  counter.release("nobody");  // never admitted: counts nothing out
  CHECK(counter.held() == 3);
  for (const char* client : {"a", "b", "c"}) counter.release(client);
  CHECK(counter.held() == 0);
}

TEST_CASE("http guard: over a connection limit a client is answered 503 at once while others are served") {
  ServerLimits limits;
  limits.connections = {/*max_connections=*/4, /*max_per_client=*/2};
  limits.request_deadline = std::chrono::seconds(60);  // the held connections stay for the whole test
  GuardedServer server(limits);
  server.Get("/ping", [](const httplib::Request&, httplib::Response& res) { res.set_content("pong", "text/plain"); });
  const int port = server.bind_to_any_port("127.0.0.1");
  REQUIRE(port > 0);
  std::thread listener([&] { server.listen_after_bind(); });
  struct Stop {
    GuardedServer& server;
    std::thread& thread;
    ~Stop() {
      server.stop();
      thread.join();
    }
  } stop{server, listener};
  REQUIRE(test::eventually([&] { return server.is_running(); }, std::chrono::seconds(30)));

  // Two connections from 127.0.0.2 that send half a head: held, until the server has counted them in.
  std::vector<std::unique_ptr<test::LoopbackSocket>> held;
  for (int i = 0; i < 2; ++i) {
    held.push_back(std::make_unique<test::LoopbackSocket>(port, "127.0.0.2"));
    REQUIRE(held.back()->ok());
    REQUIRE(held.back()->send_all("GET /ping HTTP/1.1\r\n"));
  }
  REQUIRE(test::eventually([&] { return server.connections().held_by("127.0.0.2") == 2; }, std::chrono::seconds(30)));
  const std::string ping = "GET /ping HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  test::LoopbackSocket third(port, "127.0.0.2");
  REQUIRE(third.ok());
  third.send_all(ping);
  CHECK(third.status() == 503);
  test::LoopbackSocket other(port, "127.0.0.3");
  REQUIRE(other.ok());
  REQUIRE(other.send_all(ping));
  CHECK(other.status() == 200);

  // Two more held from 127.0.0.4 fill the server: a fifth client is answered 503 too.
  for (int i = 0; i < 2; ++i) {
    held.push_back(std::make_unique<test::LoopbackSocket>(port, "127.0.0.4"));
    REQUIRE(held.back()->ok());
    REQUIRE(held.back()->send_all("GET /ping HTTP/1.1\r\n"));
  }
  REQUIRE(test::eventually([&] { return server.connections().held() == 4; }, std::chrono::seconds(30)));
  test::LoopbackSocket fifth(port, "127.0.0.5");
  REQUIRE(fifth.ok());
  fifth.send_all(ping);
  CHECK(fifth.status() == 503);
  for (const auto& s : held) CHECK_FALSE(s->peer_spoke());
}
