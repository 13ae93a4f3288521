#include "actors/telemetry.h"

#include <nlohmann/json.hpp>

#include <iostream>
#include <map>

#include "actors/unit_records.h"
#include "logging/log.h"
#include "run/durable_file.h"

namespace crucible::actors {
namespace {

using nlohmann::json;

std::string cluster_event_json(const msg::ClusterEvent& e) {
  json j;
  j["at"] = e.at;
  j["node"] = e.node;
  switch (e.kind) {
    case msg::ClusterEventKind::joined: {
      j["event"] = "joined";
      j["session"] = e.session;
      json devices = json::array();
      for (const auto& d : e.devices)
        devices.push_back({{"device", d.device.name()}, {"kind", eval::backend_name(d.device.backend)},
                           {"name", d.name}, {"memory_bytes", d.memory_bytes},
                           {"compute_capability", std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor)},
                           {"multiprocessors", d.multiprocessors}});
      j["devices"] = devices;
      break;
    }
    case msg::ClusterEventKind::lost:
      j["event"] = "lost";
      j["session"] = e.session;
      j["reason"] = e.reason;
      j["requeued"] = e.requeued;
      break;
    case msg::ClusterEventKind::late_result:
      j["event"] = "late_result";
      j["candidate_id"] = e.candidate_id;
      j["status"] = eval::status_name(e.status);
      break;
  }
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// A record that cannot be built is still written: as an evaluator_error of that candidate, never lost.
std::string record_json(msg::CandidateRecord& r, const msg::UnitRecord& unit, const log::Logger& log) {
  try {
    return candidate_record_json(r, unit);
  } catch (const std::exception& e) {
    log.error("candidate ", r.candidate.id, ": its record failed (", e.what(), "); recorded as evaluator_error");
    // Where it was evaluated, if it was, stays in the record.
    const std::optional<eval::Device> device = r.verdict ? r.verdict->verdict.device : std::nullopt;
    r.verdict = msg::report(r.candidate.id,
                            eval::verdict_without_evaluation(r.candidate.task, device, eval::Status::runtime_error,
                                                             eval::ReasonCode::evaluator_error,
                                                             std::string("record failed: ") + e.what()));
    return candidate_record_json(r, unit);
  }
}

}  // namespace

telemetry_actor::behavior_type telemetry(telemetry_actor::pointer, std::shared_ptr<run::RunDirectory> dir, bool quiet) {
  auto log = std::make_shared<log::Logger>("telemetry");
  log->info("writing ", dir->dir().string());
  auto cluster_events = std::make_shared<std::unique_ptr<run::AppendFile>>();
  // Each unit's candidate records, held until the unit commits: they come before its CommitUnit.
  auto pending = std::make_shared<std::map<std::string, std::vector<msg::CandidateRecord>>>();
  return {
      [=](msg::ClusterEvent& event) {
        try {
          if (!*cluster_events) *cluster_events = std::make_unique<run::AppendFile>(dir->dir() / "cluster.jsonl");
          (*cluster_events)->append(cluster_event_json(event) + "\n");
        } catch (const std::exception& e) {
          log->error("cannot record a cluster event: ", e.what());
        }
      },
      [=](msg::CandidateRecord& record) { (*pending)[record.unit].push_back(std::move(record)); },
      [=](msg::CommitUnit& commit) -> caf::result<committed_atom> {
        auto records = std::move((*pending)[commit.unit.name]);
        pending->erase(commit.unit.name);
        std::vector<const msg::CandidateRecord*> all;
        try {
          for (auto& r : records) {
            auto j = json::parse(record_json(r, commit.unit, *log));
            if (r.candidate.source.empty()) {
              j["source_file"] = nullptr;  // a reply with no code (parse_error): its text is in policy_output
            } else {
              const std::string hash = dir->write_source(r.candidate.source, commit.source_extension);
              j["source_file"] = "sources/" + hash + "." + commit.source_extension;
            }
            dir->append_candidate(commit.unit.name, j.dump(-1, ' ', false, json::error_handler_t::replace));
            all.push_back(&r);
          }
          const auto metrics = unit_metrics(all);
          dir->commit(commit.unit.name, unit_metrics_json(commit.unit, all, metrics), commit.policy_snapshot);
          log->info("committed ", commit.unit.name);
          if (!quiet) std::cout << progress_line(commit.progress, commit.unit, metrics) << std::endl;
        } catch (const std::exception& e) {
          // A record or commit that cannot be written (a full disk) stops the run: the unit is not committed, and
          // --resume redoes it.
          log->error("commit of ", commit.unit.name, " failed: ", e.what());
          return caf::make_error(caf::sec::runtime_error, std::string("commit failed: ") + e.what());
        }
        return committed_atom_v;
      },
  };
}

}  // namespace crucible::actors
