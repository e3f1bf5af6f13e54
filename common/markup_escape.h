// Text made safe inside HTML or XML (element text and quoted attribute values): & < > " ' as
// character references, the forms Python's markupsafe writes (&amp; &lt; &gt; &#34; &#39;), so
// Jinja's `escape` filter (server/text/jinja/filters.cc) gives what jinja2 gives, and the load
// tester's SVG and HTML reports (client/load/) stay well-formed. Bytes pass through unchanged.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace attnserve {

inline std::string EscapeMarkup(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace attnserve
