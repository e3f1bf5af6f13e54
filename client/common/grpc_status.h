// gRPC status codes by name, for messages and reports ("NOT_FOUND", as in the gRPC spec), and
// absl::Status to grpc::Status.
#ifndef ATTNSERVE_CLIENT_COMMON_GRPC_STATUS_H_
#define ATTNSERVE_CLIENT_COMMON_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"

namespace attnserve::client {

// "OK", "CANCELLED", ..., "UNAUTHENTICATED"; "CODE_<n>" for a number outside the spec.
std::string StatusCodeName(grpc::StatusCode code);

// "NOT_FOUND: no model named 'x'" (the name alone when the message is empty).
std::string FormatStatus(const grpc::Status& status);

// The same code and message as a grpc::Status (both use the canonical codes).
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_COMMON_GRPC_STATUS_H_
