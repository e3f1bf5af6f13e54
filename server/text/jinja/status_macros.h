// Early-return helpers for absl::Status / absl::StatusOr inside the engine.
#ifndef ATTNSERVE_SERVER_TEXT_JINJA_STATUS_MACROS_H_
#define ATTNSERVE_SERVER_TEXT_JINJA_STATUS_MACROS_H_

#include <utility>

#define JINJA_RETURN_IF_ERROR(expr) \
  do {                              \
    absl::Status _st = (expr);      \
    if (!_st.ok()) return _st;      \
  } while (0)

#define JINJA_ASSIGN_OR_RETURN(lhs, expr)       \
  auto lhs##_or = (expr);                       \
  if (!lhs##_or.ok()) return lhs##_or.status(); \
  auto lhs = std::move(*lhs##_or)

#endif  // ATTNSERVE_SERVER_TEXT_JINJA_STATUS_MACROS_H_
