// The parser: Jinja expressions by precedence (conditional, or, and, not, comparisons, + -, ~,
// * / // %, **, unary, primary, postfix, filters and tests).
#include <cerrno>
#include <cstdlib>

#include "server/text/jinja/parser_impl.h"

namespace attnserve::server::text::jinja::parser_internal {

ExprOr Parser::ParseTupleExpr(bool allow_cond) {
  int line = Peek().line;
  ASSIGN_OR_RETURN(auto first, ParseExpression(allow_cond));
  if (!IsOp(",")) return first;
  std::vector<ExprPtr> items;
  items.push_back(std::move(first));
  while (IsOp(",")) {
    Next();
    if (Peek().type == TokenType::kBlockEnd || Peek().type == TokenType::kVarEnd || IsName("if")) {
      break;
    }
    ASSIGN_OR_RETURN(auto e, ParseExpression(allow_cond));
    items.push_back(std::move(e));
  }
  return Make(ExprKind::kTuple, line, std::move(items));
}

ExprOr Parser::ParseExpression(bool allow_cond) {
  RETURN_IF_ERROR(Deeper(Peek()));
  ASSIGN_OR_RETURN(auto e, ParseOr());
  while (allow_cond && IsName("if")) {
    int line = Next().line;
    ASSIGN_OR_RETURN(auto cond, ParseOr());
    ExprPtr otherwise;
    if (IsName("else")) {
      Next();
      ASSIGN_OR_RETURN(auto o, ParseExpression());
      otherwise = std::move(o);
    }
    ASSIGN_OR_RETURN(auto c, Make(ExprKind::kCond, line,
                                  Args(std::move(e), std::move(cond), std::move(otherwise))));
    e = std::move(c);
  }
  --depth_;
  return e;
}

ExprOr Parser::ParseOr() {
  ASSIGN_OR_RETURN(auto left, ParseAnd());
  while (IsName("or")) {
    int line = Next().line;
    ASSIGN_OR_RETURN(auto right, ParseAnd());
    ASSIGN_OR_RETURN(auto b,
                     Make(ExprKind::kBinary, line, Args(std::move(left), std::move(right)), "or"));
    left = std::move(b);
  }
  return left;
}

ExprOr Parser::ParseAnd() {
  ASSIGN_OR_RETURN(auto left, ParseNot());
  while (IsName("and")) {
    int line = Next().line;
    ASSIGN_OR_RETURN(auto right, ParseNot());
    ASSIGN_OR_RETURN(auto b,
                     Make(ExprKind::kBinary, line, Args(std::move(left), std::move(right)), "and"));
    left = std::move(b);
  }
  return left;
}

ExprOr Parser::ParseNot() {
  if (IsName("not")) {
    int line = Next().line;
    RETURN_IF_ERROR(Deeper(Peek()));
    ASSIGN_OR_RETURN(auto inner, ParseNot());
    --depth_;
    return Make(ExprKind::kUnary, line, Args(std::move(inner)), "not");
  }
  return ParseCompare();
}

ExprOr Parser::ParseCompare() {
  ASSIGN_OR_RETURN(auto left, ParseMath1());
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
    ASSIGN_OR_RETURN(auto right, ParseMath1());
    ASSIGN_OR_RETURN(auto b,
                     Make(ExprKind::kBinary, line, Args(std::move(left), std::move(right)), op));
    left = std::move(b);
  }
}

template <typename Sub>
ExprOr Parser::ParseBinaryLevel(std::initializer_list<std::string_view> ops, Sub sub) {
  ASSIGN_OR_RETURN(auto left, (this->*sub)());
  while (true) {
    std::string op;
    for (std::string_view o : ops) {
      if (IsOp(o)) op = std::string(o);
    }
    if (op.empty()) return left;
    int line = Next().line;
    ASSIGN_OR_RETURN(auto right, (this->*sub)());
    ASSIGN_OR_RETURN(auto b,
                     Make(ExprKind::kBinary, line, Args(std::move(left), std::move(right)), op));
    left = std::move(b);
  }
}

ExprOr Parser::ParseMath1() { return ParseBinaryLevel({"+", "-"}, &Parser::ParseConcat); }

ExprOr Parser::ParseConcat() { return ParseBinaryLevel({"~"}, &Parser::ParseMath2); }

ExprOr Parser::ParseMath2() { return ParseBinaryLevel({"*", "/", "//", "%"}, &Parser::ParsePow); }

ExprOr Parser::ParsePow() { return ParseBinaryLevel({"**"}, &Parser::ParseUnaryWithFilter); }

ExprOr Parser::ParseUnaryWithFilter() { return ParseUnary(true); }

ExprOr Parser::ParseUnary(bool with_filter) {
  ExprPtr node;
  if (IsOp("-") || IsOp("+")) {
    const Token& t = Next();
    std::string op = t.value;
    RETURN_IF_ERROR(Deeper(t));
    ASSIGN_OR_RETURN(auto inner, ParseUnary(false));
    --depth_;
    ASSIGN_OR_RETURN(auto u, Make(ExprKind::kUnary, t.line, Args(std::move(inner)), op));
    node = std::move(u);
  } else {
    ASSIGN_OR_RETURN(auto p, ParsePrimary());
    node = std::move(p);
  }
  ASSIGN_OR_RETURN(auto post, ParsePostfix(std::move(node)));
  if (!with_filter) return post;
  return ParseFilterExpr(std::move(post));
}

ExprOr Parser::ParsePrimary() {
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
        RETURN_IF_ERROR(ExpectOp(","));
        tuple = true;
        if (IsOp(")")) break;
      }
      ASSIGN_OR_RETURN(auto e, ParseExpression());
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
        RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp("]")) break;
      }
      ASSIGN_OR_RETURN(auto e, ParseExpression());
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
        RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp("}")) break;
      }
      ASSIGN_OR_RETURN(auto k, ParseExpression());
      RETURN_IF_ERROR(ExpectOp(":"));
      ASSIGN_OR_RETURN(auto v, ParseExpression());
      items.push_back(std::move(k));
      items.push_back(std::move(v));
    }
    Next();
    return Make(ExprKind::kDict, line, std::move(items));
  }
  return Error(t, absl::StrCat("unexpected ", Describe(t)));
}

absl::Status Parser::ParseCallArgs(std::vector<ExprPtr>* args,
                                   std::vector<std::pair<std::string, ExprPtr>>* kwargs) {
  RETURN_IF_ERROR(ExpectOp("("));
  bool first = true;
  while (!IsOp(")")) {
    if (!first) {
      RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(")")) break;
    }
    first = false;
    if (IsOp("*") || IsOp("**")) {  // *args / **kwargs splats
      const Token& t = Next();
      std::string op = t.value;
      ASSIGN_OR_RETURN(auto v, ParseExpression());
      ASSIGN_OR_RETURN(auto splat, Make(ExprKind::kUnary, t.line, Args(std::move(v)), op));
      args->push_back(std::move(splat));
    } else if (Peek().type == TokenType::kName && IsOp("=", 1)) {
      std::string name = Next().value;
      Next();
      ASSIGN_OR_RETURN(auto v, ParseExpression());
      kwargs->emplace_back(std::move(name), std::move(v));
    } else {
      if (!kwargs->empty()) return Error(Peek(), "positional argument after keyword argument");
      ASSIGN_OR_RETURN(auto v, ParseExpression());
      args->push_back(std::move(v));
    }
  }
  Next();
  return absl::OkStatus();
}

ExprOr Parser::ParsePostfix(ExprPtr node) {
  while (true) {
    int line = Peek().line;
    if (IsOp(".")) {
      Next();
      if (Peek().type == TokenType::kInt) {
        ExprPtr idx = Literal(Value::Int(std::strtoll(Next().value.c_str(), nullptr, 10)), line);
        ASSIGN_OR_RETURN(auto s,
                         Make(ExprKind::kSubscript, line, Args(std::move(node), std::move(idx))));
        node = std::move(s);
        continue;
      }
      ASSIGN_OR_RETURN(auto name, ExpectName());
      ASSIGN_OR_RETURN(auto a, Make(ExprKind::kAttr, line, Args(std::move(node)), name));
      node = std::move(a);
    } else if (IsOp("[")) {
      Next();
      ExprPtr start, stop, step;
      if (!IsOp(":")) {
        ASSIGN_OR_RETURN(auto s, ParseExpression());
        start = std::move(s);
      }
      if (IsOp(":")) {
        Next();
        if (!IsOp("]") && !IsOp(":")) {
          ASSIGN_OR_RETURN(auto s, ParseExpression());
          stop = std::move(s);
        }
        if (IsOp(":")) {
          Next();
          if (!IsOp("]")) {
            ASSIGN_OR_RETURN(auto s, ParseExpression());
            step = std::move(s);
          }
        }
        RETURN_IF_ERROR(ExpectOp("]"));
        std::vector<ExprPtr> args;
        args.push_back(std::move(node));
        args.push_back(std::move(start));
        args.push_back(std::move(stop));
        args.push_back(std::move(step));
        ASSIGN_OR_RETURN(auto sl, Make(ExprKind::kSlice, line, std::move(args)));
        node = std::move(sl);
      } else {
        RETURN_IF_ERROR(ExpectOp("]"));
        ASSIGN_OR_RETURN(auto s,
                         Make(ExprKind::kSubscript, line, Args(std::move(node), std::move(start))));
        node = std::move(s);
      }
    } else if (IsOp("(")) {
      std::vector<ExprPtr> args;
      args.push_back(std::move(node));
      std::vector<std::pair<std::string, ExprPtr>> kwargs;
      RETURN_IF_ERROR(ParseCallArgs(&args, &kwargs));
      ASSIGN_OR_RETURN(auto c, Make(ExprKind::kCall, line, std::move(args)));
      const_cast<Expr*>(c.get())->kwargs = std::move(kwargs);
      node = std::move(c);
    } else {
      return node;
    }
  }
}

ExprOr Parser::ParseFilter(ExprPtr input) {
  int line = Peek().line;
  ASSIGN_OR_RETURN(auto name, ExpectName());
  std::vector<ExprPtr> args;
  args.push_back(std::move(input));
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  if (IsOp("(")) RETURN_IF_ERROR(ParseCallArgs(&args, &kwargs));
  ASSIGN_OR_RETURN(auto f, Make(ExprKind::kFilter, line, std::move(args), name));
  const_cast<Expr*>(f.get())->kwargs = std::move(kwargs);
  return f;
}

ExprOr Parser::ParseFilterExpr(ExprPtr node) {
  while (true) {
    if (IsOp("|")) {
      Next();
      ASSIGN_OR_RETURN(auto f, ParseFilter(std::move(node)));
      node = std::move(f);
    } else if (IsName("is")) {
      int line = Next().line;
      bool negated = false;
      if (IsName("not")) {
        Next();
        negated = true;
      }
      ASSIGN_OR_RETURN(auto name, ExpectName());
      std::vector<ExprPtr> args;
      args.push_back(std::move(node));
      std::vector<std::pair<std::string, ExprPtr>> kwargs;
      const Token& t = Peek();
      if (IsOp("(")) {
        RETURN_IF_ERROR(ParseCallArgs(&args, &kwargs));
      } else if ((t.type == TokenType::kName || t.type == TokenType::kString ||
                  t.type == TokenType::kInt || t.type == TokenType::kFloat || IsOp("[") ||
                  IsOp("{")) &&
                 !IsName("else") && !IsName("or") && !IsName("and") && !IsName("if") &&
                 !IsName("in") && !IsName("not") && !IsName("is")) {
        ASSIGN_OR_RETURN(auto p, ParsePrimary());
        ASSIGN_OR_RETURN(auto arg, ParsePostfix(std::move(p)));
        args.push_back(std::move(arg));
      }
      ASSIGN_OR_RETURN(auto test, Make(ExprKind::kTest, line, std::move(args), name));
      const_cast<Expr*>(test.get())->negated = negated;
      const_cast<Expr*>(test.get())->kwargs = std::move(kwargs);
      node = std::move(test);
    } else {
      return node;
    }
  }
}

}  // namespace attnserve::server::text::jinja::parser_internal
