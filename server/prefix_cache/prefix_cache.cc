#include "server/prefix_cache/prefix_cache.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <iterator>

namespace attnserve::server {
namespace {

// splitmix64's finaliser: every input bit moves every output bit.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

PrefixCache::PrefixCache(PrefixCacheOptions options)
    : options_(options), blocks_(options.max_bytes > 0 ? options.prefault_bytes : 0) {
  blocks_.SetRoom(options_.max_bytes);
}

uint64_t PrefixCache::Seed(const std::string& scope, const model::Model& model) const {
  return Mix(std::hash<std::string>()(scope) ^ Mix(model.fingerprint()) ^
             Mix(reinterpret_cast<uintptr_t>(&model)));
}

uint64_t PrefixCache::Step(uint64_t h, int64_t token) const {
  if (options_.hash_step != nullptr) return options_.hash_step(h, token);
  return Mix(h ^ Mix(static_cast<uint64_t>(token)));
}

PrefixCache::Entry* PrefixCache::Find(uint64_t key, const std::string& scope,
                                      const model::Model& model, const int64_t* tokens, int64_t n) {
  auto [begin, end] = index_.equal_range(key);
  for (auto it = begin; it != end; ++it) {
    Entry& e = *it->second;
    if (e.model == &model && e.tokens.length == n && e.scope == scope &&
        std::memcmp(e.tokens.data(), tokens, sizeof(int64_t) * static_cast<size_t>(n)) == 0) {
      return &e;
    }
  }
  return nullptr;
}

void PrefixCache::Touch(Entry& e) {
  if (e.order != order_.end()) order_.erase(e.order);
  e.priority = clock_ + static_cast<double>(e.tokens.length) / static_cast<double>(e.bytes);
  e.order = order_.emplace(e.priority, &e);
}

std::optional<PrefixCache::Hit> PrefixCache::Lookup(const std::string& scope,
                                                    const model::Model& model,
                                                    const int64_t* tokens, int64_t n,
                                                    int64_t max_length) {
  if (!enabled()) return std::nullopt;
  lookups_.fetch_add(1);
  const int64_t longest = std::min(n, max_length);
  if (longest < 1 || store_.empty()) return std::nullopt;
  std::vector<uint64_t> chain(static_cast<size_t>(longest) + 1);
  chain[0] = Seed(scope, model);
  for (int64_t k = 1; k <= longest; ++k) chain[k] = Step(chain[k - 1], tokens[k - 1]);
  for (int64_t k = longest; k >= 1; --k) {
    if (index_.count(chain[k]) == 0) continue;
    if (Entry* e = Find(chain[k], scope, model, tokens, k); e != nullptr) {
      // Room for the rest of the prompt and a first generated token: no KV cache regrows
      // (a copy of all of it) before the first token is out. The entry's KV entries are shared,
      // not copied; an allocation that fails is a miss.
      absl::StatusOr<model::ModelState> state = model.CloneSharingPrefix(e->state, n - k + 1);
      if (!state.ok()) return std::nullopt;
      Touch(*e);
      hits_.fetch_add(1);
      hit_tokens_.fetch_add(k);
      Hit hit{*std::move(state), k, Branch(*e, tokens, k, longest)};
      AddContinuation(*e, Intern(tokens, n), k, n);
      return hit;
    }
  }
  return std::nullopt;
}

std::vector<PrefixCache::Buffer> PrefixCache::Buffers(const model::ModelState& state) {
  std::vector<Buffer> out;
  auto add = [&](const at::Tensor& t) {
    if (!t.defined()) return;
    const void* id = t.storage().unsafeGetStorageImpl();
    for (const Buffer& b : out) {
      if (b.id == id) return;
    }
    out.push_back(Buffer{id, static_cast<int64_t>(t.storage().nbytes())});
  };
  for (const kernels::MixerState& layer : state.layers) {
    for (const at::Tensor& t : layer.tensors) add(t);
    for (const kernels::KvSegment& segment : layer.shared) {
      add(segment.k);
      add(segment.v);
    }
  }
  return out;
}

int64_t PrefixCache::UnheldBytes(const std::vector<Buffer>& buffers) const {
  int64_t bytes = 0;
  for (const Buffer& b : buffers) {
    if (held_.count(b.id) == 0) bytes += b.bytes;
  }
  return bytes;
}

int64_t PrefixCache::EntryBytes(const model::ModelState& state) const {
  return EntryBytes(Buffers(state));
}

int64_t PrefixCache::EntryBytes(const std::vector<Buffer>& buffers) const {
  int64_t bytes = 0;
  for (const Buffer& b : buffers) bytes += b.bytes;
  return std::max<int64_t>(1, bytes) + ContinuationBytes();
}

int64_t PrefixCache::ContinuationBytes() const {
  // At their longest, so that what an entry adds never grows.
  return kContinuations * ContinuationLength() * static_cast<int64_t>(sizeof(int64_t));
}

int64_t PrefixCache::ContinuationLength() const {
  return options_.interval > 0 ? options_.interval : kMaxContinuation;
}

PrefixCache::Prompt PrefixCache::Intern(const int64_t* tokens, int64_t length) {
  if (last_prompt_ == nullptr || static_cast<int64_t>(last_prompt_->size()) < length ||
      std::memcmp(last_prompt_->data(), tokens, sizeof(int64_t) * static_cast<size_t>(length)) !=
          0) {
    last_prompt_ = std::make_shared<const std::vector<int64_t>>(tokens, tokens + length);
  }
  return last_prompt_;
}

void PrefixCache::AddContinuation(Entry& e, const Prompt& prompt, int64_t n,
                                  int64_t prompt_length) {
  const int64_t length = std::min(prompt_length - n, ContinuationLength());
  if (length <= 0) return;
  Span next{prompt, n, length};
  auto same = std::find_if(e.continuations.begin(), e.continuations.end(), [&](const Span& c) {
    return c.length == length &&
           std::memcmp(c.data(), next.data(), sizeof(int64_t) * static_cast<size_t>(length)) == 0;
  });
  if (same != e.continuations.end()) e.continuations.erase(same);
  e.continuations.insert(e.continuations.begin(), std::move(next));
  if (e.continuations.size() > static_cast<size_t>(kContinuations)) e.continuations.pop_back();
}

int64_t PrefixCache::Branch(const Entry& e, const int64_t* tokens, int64_t k,
                            int64_t max_length) const {
  int64_t best = 0;
  for (const Span& span : e.continuations) {
    const int64_t limit = std::min(span.length, max_length - k);
    const int64_t* c = span.data();
    int64_t agree = 0;
    while (agree < limit && c[agree] == tokens[k + agree]) ++agree;
    best = std::max(best, agree);
  }
  return best >= kMinBranch ? k + best : 0;
}

void PrefixCache::Insert(const std::string& scope, const model::Model& model, const int64_t* tokens,
                         int64_t n, const model::ModelState& state, int64_t prompt_length) {
  if (!enabled() || n < 1) return;
  uint64_t key = Seed(scope, model);
  for (int64_t k = 0; k < n; ++k) key = Step(key, tokens[k]);
  const Prompt prompt = Intern(tokens, std::max(n, prompt_length));
  if (Entry* e = Find(key, scope, model, tokens, n); e != nullptr) {
    Touch(*e);
    AddContinuation(*e, prompt, n, prompt_length);
    return;
  }
  // The copy below holds `state`'s KV buffers and copies of its other tensors (as many bytes):
  // room is made before copying, so that the copy reuses what an eviction frees.
  const std::vector<Buffer> before = Buffers(state);
  const int64_t bytes = EntryBytes(before);
  if (bytes > options_.max_bytes) return;
  while (bytes_.load() + UnheldBytes(before) + ContinuationBytes() > options_.max_bytes &&
         !store_.empty()) {
    EvictOne();
  }
  // The session goes on computing on `state`: its recurrent tensors are copied (into one block
  // paged in ahead where one is ready), its KV caches shared (their prefix never changes; a hit
  // reads it in place, CloneSharingPrefix).
  model::ModelState copy = model.CloneSharingCaches(
      state, [this](int64_t block_bytes) { return blocks_.Take(block_bytes); });
  const std::vector<Buffer> buffers = Buffers(copy);
  int64_t added = ContinuationBytes();
  for (const Buffer& b : buffers) {
    Held& held = held_[b.id];
    if (held.entries++ == 0) {
      held.bytes = b.bytes;
      added += b.bytes;
    }
  }
  store_.emplace_back();
  Entry& e = store_.back();
  e.self = std::prev(store_.end());
  e.scope = scope;
  e.model = &model;
  e.tokens = Span{prompt, 0, n};
  AddContinuation(e, prompt, n, prompt_length);
  e.state = std::move(copy);
  e.bytes = bytes;
  for (const Buffer& b : buffers) e.buffers.push_back(b.id);
  e.key = key;
  e.order = order_.end();
  Touch(e);
  index_.emplace(key, &e);
  bytes_.fetch_add(added);
  entries_.fetch_add(1);
  // The copy's block may be a little larger than the tensors it replaced (64-byte alignment).
  while (bytes_.load() > options_.max_bytes && !store_.empty()) EvictOne();
  blocks_.SetRoom(options_.max_bytes - bytes_.load());
}

void PrefixCache::EvictOne() {
  auto lowest = order_.begin();
  Entry* victim = lowest->second;
  clock_ = lowest->first;
  order_.erase(lowest);
  auto [begin, end] = index_.equal_range(victim->key);
  for (auto it = begin; it != end; ++it) {
    if (it->second == victim) {
      index_.erase(it);
      break;
    }
  }
  int64_t freed = ContinuationBytes();
  for (const void* id : victim->buffers) {
    auto held = held_.find(id);
    if (--held->second.entries == 0) {
      freed += held->second.bytes;
      held_.erase(held);
    }
  }
  bytes_.fetch_sub(freed);
  entries_.fetch_sub(1);
  evictions_.fetch_add(1);
  // First the room, so that the victim's block, freed next, is kept for the next entry.
  blocks_.SetRoom(options_.max_bytes - bytes_.load());
  store_.erase(victim->self);
}

}  // namespace attnserve::server
