// Client input inside status messages: never more than a short, escaped prefix, so that an
// error about a 3 MiB session id or model name stays a short message (a long one overflows
// the client's metadata limit and breaks its connection) and cannot inject control bytes.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace attnserve::server {

// The first kClientTextBytes bytes of `text`, C-escaped, quoted; with "... (N bytes)" when
// cut. E.g. ClientText("abc") is 'abc'.
inline constexpr size_t kClientTextBytes = 48;
std::string ClientText(absl::string_view text);

// A session id is what the table makes: 32 lowercase hex digits. INVALID_ARGUMENT otherwise,
// before any lookup (the message shows only ClientText of it).
absl::Status ValidateSessionId(absl::string_view id);

}  // namespace attnserve::server
