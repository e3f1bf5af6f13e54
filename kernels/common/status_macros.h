// RETURN_IF_ERROR and ASSIGN_OR_RETURN for absl::Status code, as in Abseil-based servers.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define ATTNSERVE_CONCAT_INNER(a, b) a##b
#define ATTNSERVE_CONCAT(a, b) ATTNSERVE_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                              \
  do {                                                     \
    ::absl::Status _attnserve_status = (expr);             \
    if (!_attnserve_status.ok()) return _attnserve_status; \
  } while (0)

#define ASSIGN_OR_RETURN(lhs, expr) \
  ATTNSERVE_ASSIGN_OR_RETURN_IMPL(ATTNSERVE_CONCAT(_attnserve_statusor_, __LINE__), lhs, expr)

#define ATTNSERVE_ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr) \
  auto statusor = (expr);                                    \
  if (!statusor.ok()) return std::move(statusor).status();   \
  lhs = std::move(statusor).value()
