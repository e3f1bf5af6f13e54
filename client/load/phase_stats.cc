#include "client/load/phase_stats.h"

#include <functional>
#include <thread>

namespace attnserve::load {

void PhaseStats::Record(const RequestOutcome& o) {
  Shard& shard = shards_[std::hash<std::thread::id>()(std::this_thread::get_id()) % kShards];
  std::lock_guard<std::mutex> lock(shard.mu);
  PhaseTotals& t = shard.totals;
  ++t.sent;
  if (o.ok) {
    ++t.succeeded;
    t.latency_ns.Record(o.latency_ns);
    if (o.has_first_result) t.first_result_ns.Record(o.first_result_ns);
    t.tokens_in += o.tokens_in;
    t.tokens_out += o.tokens_out;
  } else {
    ++t.failed;
    ++t.errors[o.error_code];
  }
  if (o.ok && o.state_bytes >= 0) t.state_bytes.Record(static_cast<uint64_t>(o.state_bytes));
  if (!o.served_by.empty()) ++t.served_by[o.served_by];
}

PhaseTotals PhaseStats::Snapshot() const {
  PhaseTotals out;
  for (const Shard& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard.mu);
    const PhaseTotals& t = shard.totals;
    out.sent += t.sent;
    out.succeeded += t.succeeded;
    out.failed += t.failed;
    for (const auto& [code, n] : t.errors) out.errors[code] += n;
    for (const auto& [model, n] : t.served_by) out.served_by[model] += n;
    out.tokens_in += t.tokens_in;
    out.tokens_out += t.tokens_out;
    out.latency_ns.Merge(t.latency_ns);
    out.first_result_ns.Merge(t.first_result_ns);
    out.state_bytes.Merge(t.state_bytes);
  }
  return out;
}

}  // namespace attnserve::load
