#include "client/cli/printer.h"

#include <google/protobuf/util/json_util.h>

#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/common/grpc_status.h"

namespace attnserve::cli {

namespace v1 = attnserve::v1;

std::string Printer::ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = false;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string out;
  google::protobuf::util::Status status =
      google::protobuf::util::MessageToJsonString(message, &out, options);
  if (!status.ok()) {
    return absl::StrCat("{\"error\":{\"code\":\"INTERNAL\",\"message\":\"cannot print a ",
                        message.GetTypeName(), " as JSON\"}}");
  }
  return out;
}

void Printer::Message(const google::protobuf::Message& message, const std::string& text) {
  const std::string line = json_ ? ToJson(message) : text;
  std::lock_guard<std::mutex> lock(mu_);
  std::cout << line << (line.empty() || line.back() != '\n' ? "\n" : "") << std::flush;
}

void Printer::Text(const std::string& text) {
  if (json_) return;
  std::lock_guard<std::mutex> lock(mu_);
  std::cout << text << "\n" << std::flush;
}

namespace {

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", static_cast<int>(c));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

void Printer::Error(const std::string& subcommand, const grpc::Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (json_) {
    std::cout << "{\"error\":{\"code\":" << JsonString(client::StatusCodeName(status.error_code()))
              << ",\"code_number\":" << static_cast<int>(status.error_code())
              << ",\"message\":" << JsonString(status.error_message()) << "}}\n"
              << std::flush;
  }
  std::cerr << "attnserve-cli " << subcommand << ": " << client::FormatStatus(status) << "\n";
}

void Printer::Problem(const std::string& subcommand, const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  std::cerr << "attnserve-cli " << subcommand << ": " << message << "\n";
}

std::string FormatOutputs(const v1::Outputs& outputs) {
  std::string out;
  if (outputs.top_k_size() > 0) {
    std::vector<std::string> parts;
    for (const v1::TokenProbability& t : outputs.top_k()) {
      parts.push_back(absl::StrFormat("%d (%.3f)", t.token(), t.logprob()));
    }
    absl::StrAppend(&out, "top_k: ", absl::StrJoin(parts, ", "));
  }
  if (outputs.has_tensor()) {
    const v1::Tensor& t = outputs.tensor();
    if (!out.empty()) out += "; ";
    absl::StrAppend(&out, "tensor [", absl::StrJoin(t.shape(), ", "), "]");
    constexpr int kShown = 6;
    std::vector<std::string> values;
    for (int i = 0; i < t.float_data_size() && i < kShown; ++i) {
      values.push_back(absl::StrFormat("%.4g", t.float_data(i)));
    }
    for (int i = 0; i < t.int64_data_size() && i < kShown; ++i) {
      values.push_back(absl::StrCat(t.int64_data(i)));
    }
    const int n = t.float_data_size() + t.int64_data_size();
    if (n > 0) {
      absl::StrAppend(&out, " = ", absl::StrJoin(values, " "), n > kShown ? " ..." : "");
    }
  }
  return out.empty() ? "(no outputs)" : out;
}

std::string FormatTimings(const v1::Timings& t) {
  return absl::StrFormat("queue %.2f ms, compute %.2f ms, total %.2f ms", t.queue_seconds() * 1e3,
                         t.compute_seconds() * 1e3, t.total_seconds() * 1e3);
}

}  // namespace attnserve::cli
