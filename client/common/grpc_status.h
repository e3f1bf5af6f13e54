// gRPC status codes by name, for messages and reports ("NOT_FOUND", as in the gRPC spec).
#ifndef ATTNSERVE_CLIENT_COMMON_GRPC_STATUS_H_
#define ATTNSERVE_CLIENT_COMMON_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include <string>

namespace attnserve::client {

// "OK", "CANCELLED", ..., "UNAUTHENTICATED"; "CODE_<n>" for a number outside the spec.
std::string StatusCodeName(grpc::StatusCode code);

// "NOT_FOUND: no model named 'x'" (the name alone when the message is empty).
std::string FormatStatus(const grpc::Status& status);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_COMMON_GRPC_STATUS_H_
