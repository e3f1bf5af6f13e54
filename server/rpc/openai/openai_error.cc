#include "server/rpc/openai/openai_error.h"

#include <httplib.h>

#include <utility>

#include "nlohmann/json.hpp"
#include "server/rpc/openai/openai_request.h"

namespace attnserve::server::openai {

HttpError MakeHttpError(int http_status, std::string type, std::string message, std::string code,
                        std::string param) {
  HttpError e;
  e.status = http_status;
  e.type = std::move(type);
  e.message = std::move(message);
  e.code = std::move(code);
  e.param = std::move(param);
  return e;
}

HttpError ToHttpError(const absl::Status& status, ErrorPhase phase) {
  const std::string message(status.message());
  HttpError e;
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAborted:
      e = MakeHttpError(400, "invalid_request_error", message);
      break;
    case absl::StatusCode::kUnauthenticated:
      e = MakeHttpError(401, "authentication_error", message, "invalid_api_key");
      break;
    case absl::StatusCode::kPermissionDenied:
      e = MakeHttpError(403, "permission_error", message);
      break;
    case absl::StatusCode::kNotFound:
      e = MakeHttpError(404, "not_found_error", message);
      break;
    case absl::StatusCode::kResourceExhausted:
      if (phase == ErrorPhase::kRequest) {
        e = MakeHttpError(400, "invalid_request_error", message, "context_length_exceeded");
      } else {
        e = MakeHttpError(429, "rate_limit_error", message, "rate_limit_exceeded");
        e.retry_after_s = 1;
      }
      break;
    case absl::StatusCode::kUnavailable:
      e = MakeHttpError(503, "service_unavailable", message);
      e.retry_after_s = 1;
      break;
    case absl::StatusCode::kDeadlineExceeded:
      e = MakeHttpError(504, "timeout", message);
      break;
    case absl::StatusCode::kCancelled:
      e = MakeHttpError(499, "cancelled", message);
      break;
    default:
      e = MakeHttpError(500, "internal_error", message);
  }
  e.param = ParamOf(status);
  if (absl::optional<absl::Cord> code = status.GetPayload(kCodePayload); code.has_value()) {
    e.code = std::string(*code);
  }
  return e;
}

const char* CodeName(int http_status) {
  switch (http_status) {
    case 200:
      return "OK";
    case 400:
      return "INVALID_ARGUMENT";
    case 401:
      return "UNAUTHENTICATED";
    case 403:
      return "PERMISSION_DENIED";
    case 404:
      return "NOT_FOUND";
    case 413:
    case 429:
    case 431:
      return "RESOURCE_EXHAUSTED";
    case 499:
      return "CANCELLED";
    case 503:
      return "UNAVAILABLE";
    case 504:
      return "DEADLINE_EXCEEDED";
    default:
      return "INTERNAL";
  }
}

std::string ErrorBody(const HttpError& error) {
  nlohmann::json body;
  nlohmann::json& e = body["error"];
  e["message"] = error.message;
  e["type"] = error.type;
  e["param"] = error.param.empty() ? nlohmann::json() : nlohmann::json(error.param);
  e["code"] = error.code.empty() ? nlohmann::json() : nlohmann::json(error.code);
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void SendError(httplib::Response& response, const HttpError& error) {
  response.status = error.status;
  if (error.retry_after_s > 0) {
    response.set_header("retry-after", std::to_string(error.retry_after_s));
  }
  response.set_content(ErrorBody(error), "application/json");
}

}  // namespace attnserve::server::openai
