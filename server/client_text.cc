#include "server/client_text.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace attnserve::server {

std::string ClientText(absl::string_view text) {
  std::string out = absl::StrCat(
      "'", absl::CHexEscape(text.substr(0, std::min(text.size(), kClientTextBytes))), "'");
  if (text.size() > kClientTextBytes) absl::StrAppend(&out, "... (", text.size(), " bytes)");
  return out;
}

absl::Status ValidateSessionId(absl::string_view id) {
  bool ok = id.size() == 32;
  for (char c : id) ok = ok && (absl::ascii_isdigit(c) || (c >= 'a' && c <= 'f'));
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "session_id must be 32 lowercase hex digits, as StreamOpened returns; got ", ClientText(id)));
}

}  // namespace attnserve::server
