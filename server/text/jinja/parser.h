// The Jinja parser: tokens -> Program. Knows the statements chat templates use (if/for/set/macro/
// call/filter/generation/break/continue) and Jinja's expression grammar and precedence.
//
// Threads: pure function.
#ifndef ATTNSERVE_SERVER_TEXT_JINJA_PARSER_H_
#define ATTNSERVE_SERVER_TEXT_JINJA_PARSER_H_

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "server/text/jinja/ast.h"

namespace attnserve::server::text::jinja {

// INVALID_ARGUMENT with line/column on syntax errors; RESOURCE_EXHAUSTED when blocks nest deeper
// than max_depth or an expression is deeper than 4 * max_depth.
absl::StatusOr<std::unique_ptr<const Program>> ParseTemplate(std::string_view source,
                                                             int max_depth);

}  // namespace attnserve::server::text::jinja

#endif  // ATTNSERVE_SERVER_TEXT_JINJA_PARSER_H_
