#include "actors/compiler_pool.h"

#include <caf/blocking_actor.hpp>

#include "crucible/eval/utf8_text.h"
#include "logging/log.h"

namespace crucible::actors {

void compile_worker(caf::blocking_actor* self, coordinator_actor coordinator, std::shared_ptr<eval::Evaluator> front,
                    eval::EvalOptions options, int index) {
  log::Logger log{"compiler"};
  bool running = true;
  while (running) {
    self->request(coordinator, caf::infinite, pull_compile_atom_v)
        .receive(
            [&](msg::CompileRequest& request) {
              msg::CompileDone done;
              done.candidate_id = request.candidate_id;
              done.started_at = wall_now();
              try {
                eval::EvalOptions o = options;
                o.device = request.device;
                auto result = front->compile(request.source, o);
                done.ok = result.ok();
                done.cached = result.cached;
                done.seconds = result.seconds;
                done.hash = result.hash;
                done.log = result.log;
              } catch (const std::exception& e) {
                done.log = eval::valid_utf8(std::string("compiler pool: ") + e.what());
              }
              done.finished_at = wall_now();
              log.debug("worker ", index, ": candidate ", done.candidate_id, done.ok ? " built" : " failed",
                        done.cached ? " (cached) " : " ", done.seconds, " s");
              self->send(coordinator, std::move(done));
            },
            [&](caf::error&) { running = false; });
  }
}

}  // namespace crucible::actors
