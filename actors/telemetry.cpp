#include "actors/telemetry.h"

#include <nlohmann/json.hpp>

#include <iostream>
#include <map>

#include "logging/log.h"
#include "run/durable_file.h"

namespace crucible::actors {

telemetry_actor::behavior_type telemetry(telemetry_actor::pointer, std::shared_ptr<run::RunDirectory> dir, bool quiet) {
  auto log = std::make_shared<log::Logger>("telemetry");
  log->info("writing ", dir->dir().string());
  auto cluster_events = std::make_shared<std::unique_ptr<run::AppendFile>>();
  auto unwritten = std::make_shared<std::map<std::string, std::string>>();  // unit -> why a record of it failed
  return {
      [=](msg::ClusterEvent& event) {
        try {
          if (!*cluster_events) *cluster_events = std::make_unique<run::AppendFile>(dir->dir() / "cluster.jsonl");
          (*cluster_events)->append(event.json + "\n");
        } catch (const std::exception& e) {
          log->error("cannot record a cluster event: ", e.what());
        }
      },
      [=](msg::CandidateRecord& record) {
        try {
          auto json = nlohmann::json::parse(record.json);
          if (record.source.empty()) {
            json["source_file"] = nullptr;  // a reply with no code (parse_error): its text is in policy_output
          } else {
            const std::string hash = dir->write_source(record.source, record.source_extension);
            json["source_file"] = "sources/" + hash + "." + record.source_extension;
          }
          dir->append_candidate(record.unit, json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
        } catch (const std::exception& e) {
          // A record that cannot be written (a full disk) must not be lost quietly: its unit is not committed, so
          // the run stops with a message and --resume redoes the unit.
          log->error("cannot record a candidate of ", record.unit, ": ", e.what());
          (*unwritten)[record.unit] = e.what();
        }
      },
      [=](msg::CommitUnit& commit) -> caf::result<committed_atom> {
        if (auto failed = unwritten->find(commit.unit); failed != unwritten->end())
          return caf::make_error(caf::sec::runtime_error, "a candidate record of " + commit.unit +
                                                              " could not be written: " + failed->second);
        try {
          dir->commit(commit.unit, commit.metrics_json, commit.policy_snapshot);
        } catch (const std::exception& e) {
          log->error("commit of ", commit.unit, " failed: ", e.what());
          return caf::make_error(caf::sec::runtime_error, std::string("commit failed: ") + e.what());
        }
        log->info("committed ", commit.unit);
        if (!quiet && !commit.progress.empty()) std::cout << commit.progress << std::endl;
        return committed_atom_v;
      },
  };
}

}  // namespace crucible::actors
