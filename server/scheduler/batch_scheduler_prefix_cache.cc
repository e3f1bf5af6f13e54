// BatchScheduler and the prefix cache (server/prefix_cache/prefix_cache.h): a prompt starting
// from the longest cached prefix of it, the states it leaves behind at the cache's points, and
// the chunk lengths that end at those points.
#include <ATen/ATen.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "server/scheduler/active_job.h"
#include "server/scheduler/batch_scheduler.h"

namespace attnserve::server::scheduler {

void BatchScheduler::StartFromCachedPrefix(Active& a) {
  PrefixCache* cache = options_.prefix_cache;
  const model::Model& m = *a.job->model;
  Session* s = a.session();
  // The last logits only: all logits or hidden states need every position computed.
  if (cache == nullptr || !cache->enabled() || !m.can_stream() ||
      a.job->output != model::OutputKind::kLastLogits || (s != nullptr && s->state.position != 0)) {
    return;
  }
  a.cacheable = true;
  const int64_t n = a.prompt_length();
  // At most n - 1 tokens: the last one is computed, for its logits.
  std::optional<PrefixCache::Hit> hit =
      cache->Lookup(a.job->cache_scope, m, a.job->tokens.data_ptr<int64_t>(), n, n - 1);
  if (options_.metrics != nullptr) {
    options_.metrics->RecordPrefixLookup(m.name(), hit.has_value() ? hit->tokens : 0);
  }
  if (!hit.has_value()) return;
  if (s != nullptr) {
    s->state = std::move(hit->state);
  } else {
    a.own_state = std::move(hit->state);
  }
  a.consumed = a.last_cached = hit->tokens;
  a.branch_point = hit->branch;
  a.cache_start = hit->tokens;
}

void BatchScheduler::MaybeCache(Active& a, const model::ModelState& state) {
  PrefixCache* cache = options_.prefix_cache;
  if (!a.cacheable || cache == nullptr) return;
  const bool tail_point =
      a.TailPoint(cache->tail(), options_.max_batch_tokens) && a.remaining() == cache->tail();
  const bool branch_point = a.consumed == a.branch_point;
  if (a.remaining() > 0 && !tail_point && !branch_point &&
      a.consumed - a.last_cached < cache->interval()) {
    return;
  }
  cache->Insert(a.job->cache_scope, *a.job->model, a.job->tokens.data_ptr<int64_t>(), a.consumed,
                state, a.prompt_length());
  a.last_cached = a.consumed;
}

int64_t BatchScheduler::EndAtCachePoint(const Active& a, int64_t chunk) const {
  const PrefixCache& cache = *options_.prefix_cache;
  int64_t end = a.consumed + chunk;
  if (cache.interval() > 0) {
    end = std::min(end, (a.consumed / cache.interval() + 1) * cache.interval());
  }
  const int64_t tail_point = a.prompt_length() - cache.tail();
  if (a.TailPoint(cache.tail(), options_.max_batch_tokens) && a.consumed < tail_point &&
      tail_point < end) {
    end = tail_point;
  }
  if (a.consumed < a.branch_point && a.branch_point < end) end = a.branch_point;
  return end - a.consumed;
}

}  // namespace attnserve::server::scheduler
