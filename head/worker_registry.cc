#include "head/worker_registry.h"

#include <algorithm>
#include <set>

namespace ztune::head {

Result<ResourceSet> WorkerRegistry::CheckOffer(const protocol::Register& r) {
  ASSIGN_OR_RETURN(ResourceSet offered, ResourceSet::FromDoublesChecked(r.resources));
  const std::set<int64_t> gpu_ids(r.gpu_ids.begin(), r.gpu_ids.end());
  if (gpu_ids.size() != r.gpu_ids.size() || r.gpu_ids.size() > kMaxGpuIds ||
      (!gpu_ids.empty() && *gpu_ids.begin() < 0)) {
    return Status::InvalidArgument("gpu_ids must be distinct, >= 0 and at most " +
                                   std::to_string(kMaxGpuIds));
  }
  size_t formats = 0;
  for (const auto& e : r.export_formats) {
    formats += e.formats.size();
    for (const auto& f : e.formats) {
      if (f.empty() || f.size() > kMaxExportFormatBytes) {
        return Status::InvalidArgument("export format names must be 1 to " +
                                       std::to_string(kMaxExportFormatBytes) + " bytes");
      }
    }
  }
  if (formats > kMaxExportFormats) {
    return Status::InvalidArgument("more than " + std::to_string(kMaxExportFormats) +
                                   " export formats");
  }
  return offered;
}

bool WorkerRegistry::Register(const protocol::Register& r) {
  const WorkerId id(r.worker_id);  // the seam: a registration names its worker
  WorkerInfo& w = workers_[id];
  bool fresh = !w.alive;
  w.worker_id = id;
  w.name = r.name.empty() ? r.worker_id : r.name;
  w.host = r.host;
  w.pid = r.pid;
  w.incarnation = r.incarnation;
  w.total = ResourceSet::FromDoubles(r.resources);
  w.gpu_ids = r.gpu_ids;
  w.trainables = std::set<std::string>(r.trainables.begin(), r.trainables.end());
  w.export_formats.clear();
  for (const auto& e : r.export_formats) {
    w.export_formats[e.trainable].insert(e.formats.begin(), e.formats.end());
  }
  w.takes_trains =
      std::find(r.features.begin(), r.features.end(), protocol::kFeatureTrains) != r.features.end();
  w.takes_ack_trains = std::find(r.features.begin(), r.features.end(),
                                 protocol::kFeatureAckTrains) != r.features.end();
  w.last_seen = clock_.NowMs();
  w.alive = true;
  return fresh;
}

void WorkerRegistry::Touch(const WorkerId& worker_id) {
  auto it = workers_.find(worker_id);
  if (it != workers_.end() && it->second.alive) it->second.last_seen = clock_.NowMs();
}

const WorkerInfo* WorkerRegistry::FindAlive(const WorkerId& worker_id) const {
  auto it = workers_.find(worker_id);
  return (it == workers_.end() || !it->second.alive) ? nullptr : &it->second;
}

const WorkerInfo* WorkerRegistry::Find(const WorkerId& worker_id) const {
  auto it = workers_.find(worker_id);
  return it == workers_.end() ? nullptr : &it->second;
}

std::vector<WorkerId> WorkerRegistry::ExpireSilent() {
  std::vector<WorkerId> dead;
  TimeMs now = clock_.NowMs();
  for (auto& [id, w] : workers_) {
    if (w.alive && now - w.last_seen > expiry_ms_) {
      w.alive = false;
      dead.push_back(id);
    }
  }
  for (const auto& id : dead) NoteDead(id);
  return dead;
}

void WorkerRegistry::NoteDead(const WorkerId& worker_id) {
  dead_order_.push_back(worker_id);
  size_t dead = workers_.size() - NumAlive();
  while (dead > kMaxDeadWorkers && !dead_order_.empty()) {
    auto it = workers_.find(dead_order_.front());
    dead_order_.pop_front();
    if (it == workers_.end() || it->second.alive) continue;  // revived or already gone
    workers_.erase(it);
    --dead;
  }
  // Entries of revived workers could pile up in a flapping fleet.
  if (dead_order_.size() > 2 * kMaxDeadWorkers + workers_.size()) {
    std::erase_if(dead_order_, [&](const WorkerId& id) {
      auto it = workers_.find(id);
      return it == workers_.end() || it->second.alive;
    });
  }
}

void WorkerRegistry::RestartSilenceClocks() {
  const TimeMs now = clock_.NowMs();
  for (auto& [id, w] : workers_) {
    if (w.alive) w.last_seen = std::max(w.last_seen, now);
  }
}

void WorkerRegistry::MarkDead(const WorkerId& worker_id) {
  auto it = workers_.find(worker_id);
  if (it == workers_.end() || !it->second.alive) return;
  it->second.alive = false;
  NoteDead(worker_id);
}

size_t WorkerRegistry::NumAlive() const {
  size_t n = 0;
  for (const auto& [id, w] : workers_) n += w.alive ? 1 : 0;
  return n;
}

bool WorkerRegistry::AnyHosts(const std::string& trainable, std::string* offered) const {
  std::set<std::string> all;
  for (const auto& [id, w] : workers_) {
    if (!w.alive) continue;
    if (w.trainables.count(trainable)) return true;
    all.insert(w.trainables.begin(), w.trainables.end());
  }
  if (offered != nullptr) {
    offered->clear();
    for (const auto& t : all) *offered += (offered->empty() ? "" : ", ") + t;
  }
  return false;
}

Status WorkerRegistry::CheckExports(const std::string& trainable,
                                    const std::vector<std::string>& formats) const {
  if (formats.empty()) return Status::Ok();
  std::set<std::string> declared;
  bool hosted = false;
  for (const auto& [id, w] : workers_) {
    if (!w.alive || !w.trainables.count(trainable)) continue;
    hosted = true;
    auto it = w.export_formats.find(trainable);
    if (it == w.export_formats.end()) return Status::Ok();  // undeclared: may export anything
    declared.insert(it->second.begin(), it->second.end());
  }
  if (!hosted) return Status::Ok();
  for (const std::string& f : formats) {
    if (declared.count(f)) continue;
    std::string known;
    for (const auto& d : declared) known += (known.empty() ? "" : ", ") + d;
    return Status::InvalidArgument(
        "spec.export_formats: trainable '" + trainable + "' cannot export '" + f + "' (" +
        (known.empty() ? "it exports nothing" : "its workers export: " + known) + ")");
  }
  return Status::Ok();
}

}  // namespace ztune::head
