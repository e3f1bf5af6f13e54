#include "server/scheduler/queue_shares.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace attnserve::server::scheduler {

QueueShares::QueueShares(int64_t capacity, int64_t per_client)
    : capacity_(std::max<int64_t>(1, capacity)), per_client_(std::max<int64_t>(1, per_client)) {}

int64_t QueueShares::held_by(const std::string& client) const {
  auto it = held_.find(client);
  return it == held_.end() ? 0 : it->second;
}

absl::Status QueueShares::Admit(const std::string& client) const {
  const int64_t mine = held_by(client);
  if (total_ < capacity_) {
    if (mine < per_client_) return absl::OkStatus();
    return absl::ResourceExhaustedError(
        absl::StrCat("this client already has ", mine,
                     " requests waiting (--max_queue_per_client); wait for them to finish"));
  }
  const int64_t holders = clients() + (mine == 0 ? 1 : 0);
  const int64_t share = std::max<int64_t>(1, capacity_ / holders);
  if (mine < share && mine < per_client_ && total_ < 2 * capacity_) {
    for (const auto& [other, held] : held_) {
      if (other != client && held > share) return absl::OkStatus();
    }
  }
  return absl::ResourceExhaustedError(absl::StrCat("the request queue is full (", total_,
                                                   " waiting; see --max_queue); retry later"));
}

void QueueShares::Add(const std::string& client) {
  ++held_[client];
  ++total_;
}

void QueueShares::Remove(const std::string& client) {
  auto it = held_.find(client);
  if (it == held_.end()) return;
  if (--it->second == 0) held_.erase(it);
  --total_;
}

}  // namespace attnserve::server::scheduler
