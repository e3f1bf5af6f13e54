// The prefix state cache: model states after exact token prefixes, so that a new session's
// first prompt (or a sessionless Infer) that begins with a cached prefix starts from a copy of
// that state and computes only the rest.
//
// Entries. Each holds a copy of the state after exactly `tokens` (its prefix, from position 0)
// on one model, for one scope (the principal of the request that computed it with
// --prefix_cache_scope=principal, "" with global), and its bytes (ModelState::Bytes()). The
// scheduler inserts the state at the end of each such prompt, every `interval` tokens inside
// it (--prefix_cache_interval; the scheduler ends its chunks there), and `tail` tokens before
// its end (--prefix_cache_tail; a chunk ends there too; only where that is `tail` tokens or more
// past the entry the prompt started from, in prompts of at least 8 chunks: the scheduler's
// Active::TailPoint), so that a prompt that differs from an
// earlier one only in its last few tokens (a retried or edited last line) computes at most
// `tail` + those tokens. llama.cpp's server keeps the same checkpoint, 64 tokens before the end.
//
// Lookup. A hash chain over the prompt (h_k from h_{k-1} and token k, seeded by the scope and
// the model's identity) finds candidates for every prefix length from the longest allowed down;
// a candidate is a hit only when its scope, model and every token are equal, so a hash collision
// never serves a wrong state. The hit is a copy: the session computes on its own state, and an
// entry evicted later never touches a live session. A hit is a Model::CloneSharingPrefix copy:
// its recurrent tensors are copied, and its KV caches read the entry's valid entries where they
// are (shared segments, kernels/standard/kv_cache.h: never written, kept alive by whoever holds
// them, so evicting the entry frees nothing a session still reads) with own room for the rest of
// its prompt; nothing of the prefix's keys and values is copied. An entry shares the KV caches
// of the state it was taken from
// (Model::CloneSharingCaches: their prefix never changes) and copies the rest: caching a
// hybrid's 4096-token prompt end copied and paged in 16 MB per prompt before (57% of a hit's
// time in perf).
//
// Bytes. The cache counts the memory its entries keep alive: each buffer (a tensor's storage)
// once, however many entries hold it, whole, from the first entry that holds it until the last
// one goes; and each entry's continuations at their longest. The entries of one prompt share
// its KV buffers: 17 entries of a hybrid's 4096-token prompt count its 8 MB once (they counted
// it 17 times before, so a 1 GiB cache filled after ~8 such prompts).
//
// Branch points. An entry also keeps what followed its prefix in the last few prompts that
// computed or hit it (up to kContinuations of them, each up to the next cache point such a
// prompt could have: `interval` tokens, or kMaxContinuation without an interval). A hit on a
// prompt that agrees with one of them for kMinBranch tokens or more beyond the entry reports where
// it leaves it (Hit::branch): the state there is the common prefix of two prompts, which the
// scheduler then caches (its chunk ends there), so that every later prompt sharing that prefix hits
// it exactly. 32 conversations on one 4000-token system prompt: the first computes it all, the
// second from the last interval point before 4000 (and caches 4000), every other one only its own
// tokens. This is the branch node a radix tree would make, found without one: a recurrent state
// cannot be cut back to the branch afterwards, so it is taken when the second prompt passes it.
//
// Eviction: GreedyDual-Size (Cao and Irani, 1997) with cost = the prefix's tokens (the
// prefill an entry saves) and size = its bytes: an entry's priority is the clock plus
// tokens / bytes when inserted or hit; the lowest goes first and the clock rises to it, so
// entries that save many tokens per byte stay and ones not used for a while age out. The cache
// never holds more than `max_bytes` (an entry larger than that is not cached); with
// `prefault_bytes`, that bound holds its entries and the memory faulted in for the next ones
// (server/prefix_cache/prefaulted_blocks.h: the entries' recurrent tensors are copied into one
// block each, which a thread running on idle cores has paged in).
//
// Threads: used on the scheduler's thread only (inserts and lookups happen between
// computations there); bytes(), entries() and the counters are readable from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "server/model/model.h"
#include "server/prefix_cache/prefaulted_blocks.h"

namespace attnserve::server {

struct PrefixCacheOptions {
  int64_t max_bytes = int64_t{1} << 30;  // --prefix_cache_bytes; 0: the cache is off
  int64_t interval = 256;                // --prefix_cache_interval (tokens)
  // Only for tests: replaces the hash chain's step (to force collisions).
  uint64_t (*hash_step)(uint64_t h, int64_t token) = nullptr;
  int64_t tail = 64;  // --prefix_cache_tail (tokens; 0: none)
  // --prefix_cache_prefault_bytes: entries' memory faulted in ahead, within max_bytes
  // (prefaulted_blocks.h; 0: none, each entry's memory is faulted in when it is copied).
  int64_t prefault_bytes = 0;
};

class PrefixCache {
 public:
  explicit PrefixCache(PrefixCacheOptions options);

  bool enabled() const { return options_.max_bytes > 0; }
  int64_t max_bytes() const { return options_.max_bytes; }
  int64_t interval() const { return options_.interval; }
  int64_t tail() const { return options_.tail; }

  struct Hit {
    model::ModelState state;  // a copy, at position `tokens`
    int64_t tokens = 0;
    // A position in (tokens, max_length] where the prompt leaves a continuation that an
    // earlier prompt had after this entry (above), or 0 when none is known.
    int64_t branch = 0;
  };
  // Continuations kept per entry, and their length without an interval (tokens).
  static constexpr int kContinuations = 4;
  static constexpr int64_t kMaxContinuation = 1024;
  // A branch this close to its entry is not reported: the extra chunk it would cost the
  // scheduler costs about as much as computing that many tokens (a 1-token chunk vs a 32-token
  // one: 3.1 vs 4.2 ms to the first token on the default mamba).
  static constexpr int64_t kMinBranch = 32;
  // The longest cached prefix of `tokens[0, n)` of at most `max_length` tokens (>= 1) for
  // `scope` and `model`, or nothing. A hit records tokens[hit, n) as a continuation of it.
  std::optional<Hit> Lookup(const std::string& scope, const model::Model& model,
                            const int64_t* tokens, int64_t n, int64_t max_length);
  // Caches a copy of `state`, the state after `tokens[0, n)` (n >= 1), and records
  // tokens[n, prompt_length) (at most one continuation's length) as a continuation of it, where
  // `tokens` is a prompt of prompt_length >= n tokens (prompt_length <= n: none). A prefix
  // already cached only has its priority raised and the continuation recorded.
  void Insert(const std::string& scope, const model::Model& model, const int64_t* tokens, int64_t n,
              const model::ModelState& state, int64_t prompt_length = 0);

  // What an entry holding `state` counts against max_bytes when it shares no buffer with
  // another entry: the state's buffers, whole, and its continuations at their longest.
  int64_t EntryBytes(const model::ModelState& state) const;

  int64_t bytes() const { return bytes_.load(); }
  int64_t entries() const { return entries_.load(); }
  int64_t lookups() const { return lookups_.load(); }
  int64_t hits() const { return hits_.load(); }
  int64_t hit_tokens() const { return hit_tokens_.load(); }  // prefill tokens saved
  int64_t evictions() const { return evictions_.load(); }
  PrefaultedBlocksStats prefaulted() const { return blocks_.stats(); }
  // The scheduler has no work now (true) or has (false): memory for the next entries is paged
  // in only while it has none (PrefaultedBlocks::SetIdle). Any thread.
  void SchedulerIdle(bool idle) { blocks_.SetIdle(idle); }
  // Frees the memory paged in for the next entries (the idle trim). Any thread.
  void ReleasePrefaulted() { blocks_.Release(); }

 private:
  // Tokens of a prompt, shared by the entries and continuations taken from it: a 4096-token
  // prompt's 17 entries held their own prefixes before, 280 KB of new heap a prompt, paged in on
  // the scheduler's thread (~180 faults a prompt on the default mamba, 2-5% of its time here).
  using Prompt = std::shared_ptr<const std::vector<int64_t>>;
  struct Span {  // prompt[begin, begin + length)
    Prompt prompt;
    int64_t begin = 0, length = 0;
    const int64_t* data() const { return prompt->data() + begin; }
  };
  struct Entry {
    std::string scope;
    const model::Model* model = nullptr;
    Span tokens;                      // from 0: the prefix
    std::vector<Span> continuations;  // most recent first
    model::ModelState state;
    int64_t bytes = 0;                 // EntryBytes(state): its priority's size
    std::vector<const void*> buffers;  // the distinct storages state holds (held_'s keys)
    uint64_t key = 0;
    double priority = 0;
    std::multimap<double, Entry*>::iterator order;
    std::list<Entry>::iterator self;  // in store_ (std::list takes an incomplete type)
  };
  uint64_t Seed(const std::string& scope, const model::Model& model) const;
  uint64_t Step(uint64_t h, int64_t token) const;
  Entry* Find(uint64_t key, const std::string& scope, const model::Model& model,
              const int64_t* tokens, int64_t n);
  void Touch(Entry& e);
  int64_t ContinuationLength() const;
  int64_t ContinuationBytes() const;  // what an entry's continuations count
  // Records prompt[n, prompt_length) (capped) in e, if it is not there already.
  void AddContinuation(Entry& e, const Prompt& prompt, int64_t n, int64_t prompt_length);
  // tokens[0, length) as a shared Prompt: the last one made when it begins with them (the
  // scheduler's inserts of one prompt follow each other), else a new copy.
  Prompt Intern(const int64_t* tokens, int64_t length);
  // The longest agreement of tokens[k, max_length) with e's continuations, as a position.
  int64_t Branch(const Entry& e, const int64_t* tokens, int64_t k, int64_t max_length) const;
  void EvictOne();
  // The distinct storages `state`'s tensors and shared KV segments keep alive, with their bytes.
  struct Buffer {
    const void* id = nullptr;
    int64_t bytes = 0;
  };
  static std::vector<Buffer> Buffers(const model::ModelState& state);
  int64_t EntryBytes(const std::vector<Buffer>& buffers) const;  // EntryBytes(state), from these
  // What holding `buffers` would add to bytes_: those no entry holds yet.
  int64_t UnheldBytes(const std::vector<Buffer>& buffers) const;
  struct Held {
    int64_t bytes = 0;
    int64_t entries = 0;
  };

  const PrefixCacheOptions options_;
  // Entries' recurrent copies; the blocks kept ready count against max_bytes with the entries
  // (SetRoom after every change of bytes_). Declared before store_, so destroyed after it.
  PrefaultedBlocks blocks_;
  std::list<Entry> store_;
  std::unordered_multimap<uint64_t, Entry*> index_;
  std::multimap<double, Entry*> order_;         // by priority, lowest first
  std::unordered_map<const void*, Held> held_;  // every storage an entry holds
  double clock_ = 0;
  Prompt last_prompt_;
  std::atomic<int64_t> bytes_{0}, entries_{0}, lookups_{0}, hits_{0}, hit_tokens_{0}, evictions_{0};
};

}  // namespace attnserve::server
