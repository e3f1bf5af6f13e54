// Errors as OpenAI's API returns them: an HTTP status and the body
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
// from the absl::Status the core gave. Where the error happened matters for
// RESOURCE_EXHAUSTED: while reading the request (a prompt over --max_tokens_per_request or the
// model's length, a body over the limit) it is the request's fault, 400 (413 for the body) and
// retrying does not help; once the request is admitted (a full queue, the session or state
// budget, the client's share) it is 429 with retry-after, as OpenAI's rate limits are.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace httplib {
struct Response;
}  // namespace httplib

namespace attnserve::server::openai {

enum class ErrorPhase { kRequest, kServing };

struct HttpError {
  int status = 500;
  std::string type;   // invalid_request_error, authentication_error, ...
  std::string code;   // e.g. model_not_found, context_length_exceeded; "" for null
  std::string param;  // the request field at fault; "" for null
  std::string message;
  int retry_after_s = 0;  // > 0: sent as retry-after
};

HttpError ToHttpError(const absl::Status& status, ErrorPhase phase);
HttpError MakeHttpError(int http_status, std::string type, std::string message,
                        std::string code = "", std::string param = "");

// The gRPC code name of an HTTP status, for the metrics' `code` label (OK, INVALID_ARGUMENT,
// UNAUTHENTICATED, NOT_FOUND, RESOURCE_EXHAUSTED for 413/429/431, CANCELLED, UNAVAILABLE, ...),
// so that one dashboard reads all three doors.
const char* CodeName(int http_status);

// {"error": {...}} (valid UTF-8: bytes that are not are replaced).
std::string ErrorBody(const HttpError& error);

// Answers `error` on `response`: its status, retry-after when set, and ErrorBody.
void SendError(httplib::Response& response, const HttpError& error);

}  // namespace attnserve::server::openai
