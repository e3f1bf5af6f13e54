// A session as bytes, to write it to a session store, export it, or move it to another
// instance: everything needed to continue it at the exact token. Format, version 1 (integers
// little-endian):
//
//   "ATSN"  u32 format version  u32 header bytes H  header  payload  u64 checksum
//
//   header   an attnserve.v1.SessionSnapshotHeader (session_snapshot.proto), H bytes: id,
//            owner, model name and fingerprint, TTL and idle time, position, last sequence
//            number and the results kept for retries, and each state tensor's dtype and shape
//   payload  every state tensor's float32 data, in the header's order; of a growing KV cache
//            only its valid `position` entries (what StateBytesPerSequence counts)
//   checksum XXH3-64 (Debian's libxxhash) of everything before it
//
// Decoding checks all of it before building anything and returns the whole session or an
// error: DATA_LOSS for bytes that are not a snapshot, truncated, corrupt (checksum) or
// inconsistent with their model; FAILED_PRECONDITION for another format version or a model
// this server does not serve (by name, or the same name with other weights: fingerprint).
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/model/model.h"
#include "server/model/model_repository.h"
#include "server/sessions/session_table.h"

namespace attnserve::server {

inline constexpr uint32_t kSessionSnapshotVersion = 1;

struct SessionSnapshot {
  std::string session_id;
  std::string owner;  // the principal that opened it (empty: none)
  const model::Model* model = nullptr;
  absl::Duration ttl;
  // Idle time when the snapshot was taken; after decoding, idle time now (plus the time since
  // the snapshot was taken), so a session expires TTL after its last use wherever it lives.
  absl::Duration idle;
  int64_t last_sequence_number = 0;
  std::deque<Session::StoredResult> recent_results;
  model::ModelState state;  // batch 1, on the model's device

  bool expired() const { return idle > ttl; }
};

// The snapshot of `session` now. Reads the session's state: the caller makes sure that no job
// of the session runs meanwhile (the session is idle, or this runs at the head of its queue).
// Throws what allocating or copying the state throws (std::bad_alloc, c10::Error).
std::string EncodeSessionSnapshot(const Session& session);

// The session in `bytes`, with its model from `models`; see the format's errors above.
absl::StatusOr<SessionSnapshot> DecodeSessionSnapshot(std::string_view bytes,
                                                      const model::ModelRepository& models,
                                                      absl::Time now = absl::Now());

}  // namespace attnserve::server
