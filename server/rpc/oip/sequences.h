// Open Inference Protocol sequences (Triton's sequence_id / sequence_start / sequence_end) are
// attnserve sessions. A sequence's session id is derived from the caller's principal and the
// sequence's key, so that the same sequence_id of two principals are two sessions, and the
// session is found again wherever it lives (in memory, spilled to or restored from the session
// store after a restart, on another replica sharing the store) without a table of our own.
#pragma once

#include <string>

namespace attnserve::server::oip {

// 32 lowercase hex digits (the session table's id format): the first 128 bits of
// SHA-256("attnserve-oip-sequence" 0 principal 0 sequence_key). `sequence_key` is
// ParsedInfer::sequence_key ("u:5", "s:abc").
std::string SequenceSessionId(const std::string& principal, const std::string& sequence_key);

}  // namespace attnserve::server::oip
