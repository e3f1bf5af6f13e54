#include "server/text/jinja/parser.h"

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/text/jinja/lexer.h"

namespace attnserve::server::text::jinja {
namespace {

#define JINJA_RETURN_IF_ERROR(expr) \
  do {                              \
    absl::Status _st = (expr);      \
    if (!_st.ok()) return _st;      \
  } while (0)

#define JINJA_ASSIGN_OR_RETURN(lhs, expr)       \
  auto lhs##_or = (expr);                       \
  if (!lhs##_or.ok()) return lhs##_or.status(); \
  auto lhs = std::move(*lhs##_or)

using ExprOr = absl::StatusOr<ExprPtr>;

class Parser {
 public:
  Parser(std::vector<Token> tokens, int max_depth)
      : toks_(std::move(tokens)), max_depth_(max_depth) {}

  absl::StatusOr<std::unique_ptr<const Program>> Run() {
    auto program = std::make_unique<Program>();
    std::string end;
    JINJA_RETURN_IF_ERROR(ParseBody(&program->body, {}, &end));
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

  // ---- statements ----

  absl::Status ParseBody(Body* body, std::initializer_list<const char*> ends, std::string* end) {
    JINJA_RETURN_IF_ERROR(Deeper(Peek()));
    while (true) {
      const Token& t = Peek();
      switch (t.type) {
        case TokenType::kEof:
          if (ends.size() != 0) {
            return Error(
                t, absl::StrCat("unexpected end of template, expected '", *ends.begin(), "'"));
          }
          --depth_;
          return absl::OkStatus();
        case TokenType::kText: {
          auto n = std::make_unique<Node>();
          n->kind = NodeKind::kText;
          n->line = t.line;
          n->text = Next().value;
          body->push_back(std::move(n));
          break;
        }
        case TokenType::kVarBegin: {
          Next();
          auto n = std::make_unique<Node>();
          n->kind = NodeKind::kOutput;
          n->line = t.line;
          JINJA_ASSIGN_OR_RETURN(e, ParseTupleExpr());
          n->expr = std::move(e);
          if (Peek().type != TokenType::kVarEnd) {
            return Error(Peek(), absl::StrCat("expected '}}', got ", Describe(Peek())));
          }
          Next();
          body->push_back(std::move(n));
          break;
        }
        case TokenType::kBlockBegin: {
          const Token& kw = Peek(1);
          if (kw.type != TokenType::kName) return Error(kw, "expected a statement name");
          for (const char* e : ends) {
            if (kw.value == e) {
              Next();
              Next();
              *end = kw.value;
              --depth_;
              return absl::OkStatus();
            }
          }
          Next();
          JINJA_RETURN_IF_ERROR(ParseStatement(body));
          break;
        }
        default:
          return Error(t, absl::StrCat("unexpected ", Describe(t)));
      }
    }
  }

  absl::Status ParseStatement(Body* body) {
    const Token kw = Next();
    auto n = std::make_unique<Node>();
    n->line = kw.line;
    const std::string& k = kw.value;
    std::string end;
    if (k == "if") {
      n->kind = NodeKind::kIf;
      JINJA_ASSIGN_OR_RETURN(cond, ParseExpression());
      n->conditions.push_back(std::move(cond));
      JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
      while (true) {
        n->bodies.emplace_back();
        JINJA_RETURN_IF_ERROR(ParseBody(&n->bodies.back(), {"elif", "else", "endif"}, &end));
        if (end == "elif") {
          JINJA_ASSIGN_OR_RETURN(c, ParseExpression());
          n->conditions.push_back(std::move(c));
          JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
        } else if (end == "else") {
          JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
          n->bodies.emplace_back();
          JINJA_RETURN_IF_ERROR(ParseBody(&n->bodies.back(), {"endif"}, &end));
          break;
        } else {
          break;
        }
      }
    } else if (k == "for") {
      n->kind = NodeKind::kFor;
      JINJA_RETURN_IF_ERROR(ParseTargets(&n->targets));
      if (!IsName("in")) return Error(Peek(), "expected 'in'");
      Next();
      JINJA_ASSIGN_OR_RETURN(iter, ParseTupleExpr(/*allow_cond=*/false));
      n->expr = std::move(iter);
      if (IsName("if")) {
        Next();
        JINJA_ASSIGN_OR_RETURN(c, ParseExpression());
        n->cond = std::move(c);
      }
      if (IsName("recursive")) return Error(Peek(), "recursive loops are not supported");
      JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
      ++loop_depth_;
      n->bodies.emplace_back();
      JINJA_RETURN_IF_ERROR(ParseBody(&n->bodies.back(), {"else", "endfor"}, &end));
      --loop_depth_;
      if (end == "else") {
        JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
        n->bodies.emplace_back();
        JINJA_RETURN_IF_ERROR(ParseBody(&n->bodies.back(), {"endfor"}, &end));
      }
    } else if (k == "set") {
      n->kind = NodeKind::kSet;
      JINJA_ASSIGN_OR_RETURN(first, ExpectName());
      if (IsOp(".")) {
        Next();
        JINJA_ASSIGN_OR_RETURN(attr, ExpectName());
        n->targets.push_back(first);
        n->text = attr;
      } else {
        n->targets.push_back(first);
        while (IsOp(",")) {
          Next();
          JINJA_ASSIGN_OR_RETURN(more, ExpectName());
          n->targets.push_back(more);
        }
      }
      if (IsOp("=")) {
        Next();
        JINJA_ASSIGN_OR_RETURN(v, ParseTupleExpr());
        n->expr = std::move(v);
      } else {
        if (!n->text.empty() || n->targets.size() != 1) {
          return Error(Peek(), "expected '='");
        }
        JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
        n->bodies.emplace_back();
        JINJA_RETURN_IF_ERROR(ParseBody(&n->bodies.back(), {"endset"}, &end));
      }
    } else if (k == "macro") {
      n->kind = NodeKind::kMacro;
      JINJA_ASSIGN_OR_RETURN(name, ExpectName());
      n->text = name;
      JINJA_RETURN_IF_ERROR(ParseParams(&n->params));
      JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
      int saved_loops = loop_depth_;
      loop_depth_ = 0;
      n->bodies.emplace_back();
      JINJA_RETURN_IF_ERROR(ParseBody(&n->bodies.back(), {"endmacro"}, &end));
      loop_depth_ = saved_loops;
    } else if (k == "call") {
      n->kind = NodeKind::kCallBlock;
      if (IsOp("(")) JINJA_RETURN_IF_ERROR(ParseParams(&n->params));
      JINJA_ASSIGN_OR_RETURN(call, ParseExpression());
      if (call->kind != ExprKind::kCall) return Error(kw, "expected a call after 'call'");
      n->expr = std::move(call);
      JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
      n->bodies.emplace_back();
      JINJA_RETURN_IF_ERROR(ParseBody(&n->bodies.back(), {"endcall"}, &end));
    } else if (k == "filter") {
      n->kind = NodeKind::kFilterBlock;
      ExprPtr chain = nullptr;
      do {
        if (chain) Next();  // '|'
        JINJA_ASSIGN_OR_RETURN(f, ParseFilter(std::move(chain)));
        chain = std::move(f);
      } while (IsOp("|"));
      n->expr = std::move(chain);
      JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
      n->bodies.emplace_back();
      JINJA_RETURN_IF_ERROR(ParseBody(&n->bodies.back(), {"endfilter"}, &end));
    } else if (k == "generation") {
      // Hugging Face's {% generation %}: marks assistant text for masks; renders its contents.
      n->kind = NodeKind::kIf;
      n->conditions.push_back(Literal(Value::Bool(true), kw.line));
      JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
      n->bodies.emplace_back();
      JINJA_RETURN_IF_ERROR(ParseBody(&n->bodies.back(), {"endgeneration"}, &end));
    } else if (k == "break" || k == "continue") {
      if (loop_depth_ == 0) return Error(kw, absl::StrCat("'", k, "' outside of a loop"));
      n->kind = k == "break" ? NodeKind::kBreak : NodeKind::kContinue;
    } else {
      return Error(kw, absl::StrCat("unknown statement '", k, "'"));
    }
    JINJA_RETURN_IF_ERROR(ExpectBlockEnd());
    body->push_back(std::move(n));
    return absl::OkStatus();
  }

  absl::Status ParseTargets(std::vector<std::string>* targets) {
    bool paren = IsOp("(");
    if (paren) Next();
    do {
      if (!targets->empty()) Next();  // ','
      JINJA_ASSIGN_OR_RETURN(name, ExpectName());
      targets->push_back(name);
    } while (IsOp(","));
    if (paren) JINJA_RETURN_IF_ERROR(ExpectOp(")"));
    return absl::OkStatus();
  }

  absl::Status ParseParams(std::vector<std::pair<std::string, ExprPtr>>* params) {
    JINJA_RETURN_IF_ERROR(ExpectOp("("));
    while (!IsOp(")")) {
      if (!params->empty()) JINJA_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(")")) break;
      JINJA_ASSIGN_OR_RETURN(name, ExpectName());
      ExprPtr def;
      if (IsOp("=")) {
        Next();
        JINJA_ASSIGN_OR_RETURN(d, ParseExpression());
        def = std::move(d);
      }
      params->emplace_back(name, std::move(def));
    }
    return ExpectOp(")");
  }

  // ---- expressions ----

  // expression [, expression]* : a tuple when there is a comma.
  ExprOr ParseTupleExpr(bool allow_cond = true) {
    int line = Peek().line;
    JINJA_ASSIGN_OR_RETURN(first, ParseExpression(allow_cond));
    if (!IsOp(",")) return first;
    std::vector<ExprPtr> items;
    items.push_back(std::move(first));
    while (IsOp(",")) {
      Next();
      if (Peek().type == TokenType::kBlockEnd || Peek().type == TokenType::kVarEnd ||
          IsName("if")) {
        break;
      }
      JINJA_ASSIGN_OR_RETURN(e, ParseExpression(allow_cond));
      items.push_back(std::move(e));
    }
    return Make(ExprKind::kTuple, line, std::move(items));
  }

  ExprOr ParseExpression(bool allow_cond = true) {
    JINJA_RETURN_IF_ERROR(Deeper(Peek()));
    JINJA_ASSIGN_OR_RETURN(e, ParseOr());
    while (allow_cond && IsName("if")) {
      int line = Next().line;
      JINJA_ASSIGN_OR_RETURN(cond, ParseOr());
      ExprPtr otherwise;
      if (IsName("else")) {
        Next();
        JINJA_ASSIGN_OR_RETURN(o, ParseExpression());
        otherwise = std::move(o);
      }
      JINJA_ASSIGN_OR_RETURN(c, Make(ExprKind::kCond, line,
                                     Args(std::move(e), std::move(cond), std::move(otherwise))));
      e = std::move(c);
    }
    --depth_;
    return e;
  }

  ExprOr ParseOr() {
    JINJA_ASSIGN_OR_RETURN(left, ParseAnd());
    while (IsName("or")) {
      int line = Next().line;
      JINJA_ASSIGN_OR_RETURN(right, ParseAnd());
      JINJA_ASSIGN_OR_RETURN(
          b, Make(ExprKind::kBinary, line, Args(std::move(left), std::move(right)), "or"));
      left = std::move(b);
    }
    return left;
  }

  ExprOr ParseAnd() {
    JINJA_ASSIGN_OR_RETURN(left, ParseNot());
    while (IsName("and")) {
      int line = Next().line;
      JINJA_ASSIGN_OR_RETURN(right, ParseNot());
      JINJA_ASSIGN_OR_RETURN(
          b, Make(ExprKind::kBinary, line, Args(std::move(left), std::move(right)), "and"));
      left = std::move(b);
    }
    return left;
  }

  ExprOr ParseNot() {
    if (IsName("not")) {
      int line = Next().line;
      JINJA_RETURN_IF_ERROR(Deeper(Peek()));
      JINJA_ASSIGN_OR_RETURN(inner, ParseNot());
      --depth_;
      return Make(ExprKind::kUnary, line, Args(std::move(inner)), "not");
    }
    return ParseCompare();
  }

  ExprOr ParseCompare() {
    JINJA_ASSIGN_OR_RETURN(left, ParseMath1());
    while (true) {
      std::string op;
      if (Peek().type == TokenType::kOp &&
          (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp(">") || IsOp("<=") || IsOp(">="))) {
        op = Peek().value;
        Next();
      } else if (IsName("in")) {
        op = "in";
        Next();
      } else if (IsName("not") && IsName("in", 1)) {
        op = "not in";
        Next();
        Next();
      } else {
        return left;
      }
      int line = left->line;
      JINJA_ASSIGN_OR_RETURN(right, ParseMath1());
      JINJA_ASSIGN_OR_RETURN(
          b, Make(ExprKind::kBinary, line, Args(std::move(left), std::move(right)), op));
      left = std::move(b);
    }
  }

  template <typename Sub>
  ExprOr ParseBinaryLevel(std::initializer_list<std::string_view> ops, Sub sub) {
    JINJA_ASSIGN_OR_RETURN(left, (this->*sub)());
    while (true) {
      std::string op;
      for (std::string_view o : ops) {
        if (IsOp(o)) op = std::string(o);
      }
      if (op.empty()) return left;
      int line = Next().line;
      JINJA_ASSIGN_OR_RETURN(right, (this->*sub)());
      JINJA_ASSIGN_OR_RETURN(
          b, Make(ExprKind::kBinary, line, Args(std::move(left), std::move(right)), op));
      left = std::move(b);
    }
  }
  ExprOr ParseMath1() { return ParseBinaryLevel({"+", "-"}, &Parser::ParseConcat); }
  ExprOr ParseConcat() { return ParseBinaryLevel({"~"}, &Parser::ParseMath2); }
  ExprOr ParseMath2() { return ParseBinaryLevel({"*", "/", "//", "%"}, &Parser::ParsePow); }
  ExprOr ParsePow() { return ParseBinaryLevel({"**"}, &Parser::ParseUnaryWithFilter); }
  ExprOr ParseUnaryWithFilter() { return ParseUnary(true); }

  ExprOr ParseUnary(bool with_filter) {
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      const Token& t = Next();
      std::string op = t.value;
      JINJA_RETURN_IF_ERROR(Deeper(t));
      JINJA_ASSIGN_OR_RETURN(inner, ParseUnary(false));
      --depth_;
      JINJA_ASSIGN_OR_RETURN(u, Make(ExprKind::kUnary, t.line, Args(std::move(inner)), op));
      node = std::move(u);
    } else {
      JINJA_ASSIGN_OR_RETURN(p, ParsePrimary());
      node = std::move(p);
    }
    JINJA_ASSIGN_OR_RETURN(post, ParsePostfix(std::move(node)));
    if (!with_filter) return post;
    return ParseFilterExpr(std::move(post));
  }

  ExprOr ParsePrimary() {
    const Token& t = Peek();
    int line = t.line;
    switch (t.type) {
      case TokenType::kName: {
        std::string v = Next().value;
        if (v == "true" || v == "True") return Literal(Value::Bool(true), line);
        if (v == "false" || v == "False") return Literal(Value::Bool(false), line);
        if (v == "none" || v == "None") return Literal(Value::None(), line);
        auto e = std::make_unique<Expr>();
        e->kind = ExprKind::kName;
        e->line = line;
        e->name = std::move(v);
        return ExprPtr(std::move(e));
      }
      case TokenType::kString: {
        std::string s = Next().value;
        while (Peek().type == TokenType::kString) s += Next().value;
        return Literal(Value::String(std::move(s)), line);
      }
      case TokenType::kInt: {
        std::string digits = Next().value;
        errno = 0;
        char* end = nullptr;
        long long v = std::strtoll(digits.c_str(), &end, 10);
        if (errno == ERANGE) return Error(t, "integer literal too large");
        return Literal(Value::Int(v), line);
      }
      case TokenType::kFloat:
        return Literal(Value::Float(std::strtod(Next().value.c_str(), nullptr)), line);
      case TokenType::kOp:
        break;
      default:
        return Error(t, absl::StrCat("unexpected ", Describe(t)));
    }
    if (IsOp("(")) {
      Next();
      std::vector<ExprPtr> items;
      bool tuple = false;
      while (!IsOp(")")) {
        if (!items.empty()) {
          JINJA_RETURN_IF_ERROR(ExpectOp(","));
          tuple = true;
          if (IsOp(")")) break;
        }
        JINJA_ASSIGN_OR_RETURN(e, ParseExpression());
        items.push_back(std::move(e));
      }
      Next();
      if (items.empty()) tuple = true;
      if (!tuple) return std::move(items[0]);
      return Make(ExprKind::kTuple, line, std::move(items));
    }
    if (IsOp("[")) {
      Next();
      std::vector<ExprPtr> items;
      while (!IsOp("]")) {
        if (!items.empty()) {
          JINJA_RETURN_IF_ERROR(ExpectOp(","));
          if (IsOp("]")) break;
        }
        JINJA_ASSIGN_OR_RETURN(e, ParseExpression());
        items.push_back(std::move(e));
      }
      Next();
      return Make(ExprKind::kList, line, std::move(items));
    }
    if (IsOp("{")) {
      Next();
      std::vector<ExprPtr> items;
      while (!IsOp("}")) {
        if (!items.empty()) {
          JINJA_RETURN_IF_ERROR(ExpectOp(","));
          if (IsOp("}")) break;
        }
        JINJA_ASSIGN_OR_RETURN(k, ParseExpression());
        JINJA_RETURN_IF_ERROR(ExpectOp(":"));
        JINJA_ASSIGN_OR_RETURN(v, ParseExpression());
        items.push_back(std::move(k));
        items.push_back(std::move(v));
      }
      Next();
      return Make(ExprKind::kDict, line, std::move(items));
    }
    return Error(t, absl::StrCat("unexpected ", Describe(t)));
  }

  absl::Status ParseCallArgs(std::vector<ExprPtr>* args,
                             std::vector<std::pair<std::string, ExprPtr>>* kwargs) {
    JINJA_RETURN_IF_ERROR(ExpectOp("("));
    bool first = true;
    while (!IsOp(")")) {
      if (!first) {
        JINJA_RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp(")")) break;
      }
      first = false;
      if (IsOp("*") || IsOp("**")) {  // *args / **kwargs splats
        const Token& t = Next();
        std::string op = t.value;
        JINJA_ASSIGN_OR_RETURN(v, ParseExpression());
        JINJA_ASSIGN_OR_RETURN(splat, Make(ExprKind::kUnary, t.line, Args(std::move(v)), op));
        args->push_back(std::move(splat));
      } else if (Peek().type == TokenType::kName && IsOp("=", 1)) {
        std::string name = Next().value;
        Next();
        JINJA_ASSIGN_OR_RETURN(v, ParseExpression());
        kwargs->emplace_back(std::move(name), std::move(v));
      } else {
        if (!kwargs->empty()) return Error(Peek(), "positional argument after keyword argument");
        JINJA_ASSIGN_OR_RETURN(v, ParseExpression());
        args->push_back(std::move(v));
      }
    }
    Next();
    return absl::OkStatus();
  }

  ExprOr ParsePostfix(ExprPtr node) {
    while (true) {
      int line = Peek().line;
      if (IsOp(".")) {
        Next();
        if (Peek().type == TokenType::kInt) {
          ExprPtr idx = Literal(Value::Int(std::strtoll(Next().value.c_str(), nullptr, 10)), line);
          JINJA_ASSIGN_OR_RETURN(
              s, Make(ExprKind::kSubscript, line, Args(std::move(node), std::move(idx))));
          node = std::move(s);
          continue;
        }
        JINJA_ASSIGN_OR_RETURN(name, ExpectName());
        JINJA_ASSIGN_OR_RETURN(a, Make(ExprKind::kAttr, line, Args(std::move(node)), name));
        node = std::move(a);
      } else if (IsOp("[")) {
        Next();
        ExprPtr start, stop, step;
        if (!IsOp(":")) {
          JINJA_ASSIGN_OR_RETURN(s, ParseExpression());
          start = std::move(s);
        }
        if (IsOp(":")) {
          Next();
          if (!IsOp("]") && !IsOp(":")) {
            JINJA_ASSIGN_OR_RETURN(s, ParseExpression());
            stop = std::move(s);
          }
          if (IsOp(":")) {
            Next();
            if (!IsOp("]")) {
              JINJA_ASSIGN_OR_RETURN(s, ParseExpression());
              step = std::move(s);
            }
          }
          JINJA_RETURN_IF_ERROR(ExpectOp("]"));
          std::vector<ExprPtr> args;
          args.push_back(std::move(node));
          args.push_back(std::move(start));
          args.push_back(std::move(stop));
          args.push_back(std::move(step));
          JINJA_ASSIGN_OR_RETURN(sl, Make(ExprKind::kSlice, line, std::move(args)));
          node = std::move(sl);
        } else {
          JINJA_RETURN_IF_ERROR(ExpectOp("]"));
          JINJA_ASSIGN_OR_RETURN(
              s, Make(ExprKind::kSubscript, line, Args(std::move(node), std::move(start))));
          node = std::move(s);
        }
      } else if (IsOp("(")) {
        std::vector<ExprPtr> args;
        args.push_back(std::move(node));
        std::vector<std::pair<std::string, ExprPtr>> kwargs;
        JINJA_RETURN_IF_ERROR(ParseCallArgs(&args, &kwargs));
        JINJA_ASSIGN_OR_RETURN(c, Make(ExprKind::kCall, line, std::move(args)));
        const_cast<Expr*>(c.get())->kwargs = std::move(kwargs);
        node = std::move(c);
      } else {
        return node;
      }
    }
  }

  // name [(args)] applied to `input` (null for a filter block).
  ExprOr ParseFilter(ExprPtr input) {
    int line = Peek().line;
    JINJA_ASSIGN_OR_RETURN(name, ExpectName());
    std::vector<ExprPtr> args;
    args.push_back(std::move(input));
    std::vector<std::pair<std::string, ExprPtr>> kwargs;
    if (IsOp("(")) JINJA_RETURN_IF_ERROR(ParseCallArgs(&args, &kwargs));
    JINJA_ASSIGN_OR_RETURN(f, Make(ExprKind::kFilter, line, std::move(args), name));
    const_cast<Expr*>(f.get())->kwargs = std::move(kwargs);
    return f;
  }

  ExprOr ParseFilterExpr(ExprPtr node) {
    while (true) {
      if (IsOp("|")) {
        Next();
        JINJA_ASSIGN_OR_RETURN(f, ParseFilter(std::move(node)));
        node = std::move(f);
      } else if (IsName("is")) {
        int line = Next().line;
        bool negated = false;
        if (IsName("not")) {
          Next();
          negated = true;
        }
        JINJA_ASSIGN_OR_RETURN(name, ExpectName());
        std::vector<ExprPtr> args;
        args.push_back(std::move(node));
        std::vector<std::pair<std::string, ExprPtr>> kwargs;
        const Token& t = Peek();
        if (IsOp("(")) {
          JINJA_RETURN_IF_ERROR(ParseCallArgs(&args, &kwargs));
        } else if ((t.type == TokenType::kName || t.type == TokenType::kString ||
                    t.type == TokenType::kInt || t.type == TokenType::kFloat || IsOp("[") ||
                    IsOp("{")) &&
                   !IsName("else") && !IsName("or") && !IsName("and") && !IsName("if") &&
                   !IsName("in") && !IsName("not") && !IsName("is")) {
          JINJA_ASSIGN_OR_RETURN(p, ParsePrimary());
          JINJA_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(p)));
          args.push_back(std::move(arg));
        }
        JINJA_ASSIGN_OR_RETURN(test, Make(ExprKind::kTest, line, std::move(args), name));
        const_cast<Expr*>(test.get())->negated = negated;
        const_cast<Expr*>(test.get())->kwargs = std::move(kwargs);
        node = std::move(test);
      } else {
        return node;
      }
    }
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int max_depth_;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<const Program>> ParseTemplate(std::string_view source,
                                                             int max_depth) {
  absl::StatusOr<std::vector<Token>> tokens = Tokenize(source);
  if (!tokens.ok()) return tokens.status();
  return Parser(std::move(*tokens), max_depth).Run();
}

}  // namespace attnserve::server::text::jinja
