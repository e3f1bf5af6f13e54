// The parser's class, shared by parser.cc (statements) and expression_parser.cc (expressions).
// Internal to the engine: use ParseTemplate (parser.h).
#ifndef ATTNSERVE_SERVER_TEXT_JINJA_PARSER_IMPL_H_
#define ATTNSERVE_SERVER_TEXT_JINJA_PARSER_IMPL_H_

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"
#include "server/text/jinja/ast.h"
#include "server/text/jinja/lexer.h"

namespace attnserve::server::text::jinja::parser_internal {

using ExprOr = absl::StatusOr<ExprPtr>;

class Parser {
 public:
  Parser(std::vector<Token> tokens, int max_depth)
      : toks_(std::move(tokens)), max_depth_(max_depth) {}

  absl::StatusOr<std::unique_ptr<const Program>> Run() {
    auto program = std::make_unique<Program>();
    std::string end;
    RETURN_IF_ERROR(ParseBody(&program->body, {}, &end));
    return std::unique_ptr<const Program>(std::move(program));
  }

 private:
  const Token& Peek(size_t k = 0) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  const Token& Next() {
    const Token& t = toks_[pos_];
    if (pos_ + 1 < toks_.size()) ++pos_;
    return t;
  }
  bool IsOp(std::string_view op, size_t k = 0) const {
    return Peek(k).type == TokenType::kOp && Peek(k).value == op;
  }
  bool IsName(std::string_view name, size_t k = 0) const {
    return Peek(k).type == TokenType::kName && Peek(k).value == name;
  }
  absl::Status Error(const Token& t, const std::string& msg) const {
    return absl::InvalidArgumentError(absl::StrCat("chat template: syntax error at line ", t.line,
                                                   ", column ", t.column, ": ", msg));
  }
  std::string Describe(const Token& t) const {
    switch (t.type) {
      case TokenType::kEof:
        return "end of template";
      case TokenType::kBlockEnd:
        return "'%}'";
      case TokenType::kVarEnd:
        return "'}}'";
      case TokenType::kText:
        return "text";
      case TokenType::kString:
        return "string literal";
      default:
        return absl::StrCat("'", t.value, "'");
    }
  }
  absl::Status ExpectOp(const std::string& op) {
    if (!IsOp(op))
      return Error(Peek(), absl::StrCat("expected '", op, "', got ", Describe(Peek())));
    Next();
    return absl::OkStatus();
  }
  absl::Status ExpectBlockEnd() {
    if (Peek().type != TokenType::kBlockEnd) {
      return Error(Peek(), absl::StrCat("expected '%}', got ", Describe(Peek())));
    }
    Next();
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Peek().type != TokenType::kName) {
      return Error(Peek(), absl::StrCat("expected a name, got ", Describe(Peek())));
    }
    return Next().value;
  }
  absl::Status Deeper(const Token& t) {
    if (++depth_ > max_depth_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("chat template: nesting deeper than ", max_depth_, " at line ", t.line));
    }
    return absl::OkStatus();
  }

  ExprOr Make(ExprKind kind, int line, std::vector<ExprPtr> args, std::string name = "") {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    e->name = std::move(name);
    int depth = 0;
    for (const auto& a : args) {
      if (a) depth = std::max(depth, a->depth);
    }
    e->args = std::move(args);
    e->depth = depth + 1;
    if (e->depth > 4 * max_depth_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "chat template: expression nested deeper than ", 4 * max_depth_, " at line ", line));
    }
    return ExprPtr(std::move(e));
  }
  ExprPtr Literal(Value v, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = ExprKind::kLiteral;
    e->line = line;
    e->literal = std::move(v);
    return e;
  }
  static std::vector<ExprPtr> Args(ExprPtr a, ExprPtr b = nullptr, ExprPtr c = nullptr,
                                   ExprPtr d = nullptr) {
    std::vector<ExprPtr> v;
    v.push_back(std::move(a));
    if (b || c || d) v.push_back(std::move(b));
    if (c || d) v.push_back(std::move(c));
    if (d) v.push_back(std::move(d));
    return v;
  }

  // Statements (parser.cc).
  absl::Status ParseBody(Body* body, std::initializer_list<const char*> ends, std::string* end);
  absl::Status ParseStatement(Body* body);
  absl::Status ParseTargets(std::vector<std::string>* targets);
  absl::Status ParseParams(std::vector<std::pair<std::string, ExprPtr>>* params);

  // Expressions (expression_parser.cc).
  ExprOr ParseTupleExpr(bool allow_cond = true);
  ExprOr ParseExpression(bool allow_cond = true);
  ExprOr ParseOr();
  ExprOr ParseAnd();
  ExprOr ParseNot();
  ExprOr ParseCompare();
  template <typename Sub>
  ExprOr ParseBinaryLevel(std::initializer_list<std::string_view> ops, Sub sub);
  ExprOr ParseMath1();
  ExprOr ParseConcat();
  ExprOr ParseMath2();
  ExprOr ParsePow();
  ExprOr ParseUnaryWithFilter();
  ExprOr ParseUnary(bool with_filter);
  ExprOr ParsePrimary();
  absl::Status ParseCallArgs(std::vector<ExprPtr>* args,
                             std::vector<std::pair<std::string, ExprPtr>>* kwargs);
  ExprOr ParsePostfix(ExprPtr node);
  ExprOr ParseFilter(ExprPtr input);
  ExprOr ParseFilterExpr(ExprPtr node);

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int max_depth_;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace attnserve::server::text::jinja::parser_internal

#endif  // ATTNSERVE_SERVER_TEXT_JINJA_PARSER_IMPL_H_
