// The parser: statements (if/for/set/macro/call/filter/generation/break/continue) and bodies.
#include "server/text/jinja/parser.h"

#include "server/text/jinja/parser_impl.h"

namespace attnserve::server::text::jinja {
namespace parser_internal {

absl::Status Parser::ParseBody(Body* body, std::initializer_list<const char*> ends,
                               std::string* end) {
  RETURN_IF_ERROR(Deeper(Peek()));
  while (true) {
    const Token& t = Peek();
    switch (t.type) {
      case TokenType::kEof:
        if (ends.size() != 0) {
          return Error(t,
                       absl::StrCat("unexpected end of template, expected '", *ends.begin(), "'"));
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
        ASSIGN_OR_RETURN(auto e, ParseTupleExpr());
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
        RETURN_IF_ERROR(ParseStatement(body));
        break;
      }
      default:
        return Error(t, absl::StrCat("unexpected ", Describe(t)));
    }
  }
}

absl::Status Parser::ParseStatement(Body* body) {
  const Token kw = Next();
  auto n = std::make_unique<Node>();
  n->line = kw.line;
  const std::string& k = kw.value;
  std::string end;
  if (k == "if") {
    n->kind = NodeKind::kIf;
    ASSIGN_OR_RETURN(auto cond, ParseExpression());
    n->conditions.push_back(std::move(cond));
    RETURN_IF_ERROR(ExpectBlockEnd());
    while (true) {
      n->bodies.emplace_back();
      RETURN_IF_ERROR(ParseBody(&n->bodies.back(), {"elif", "else", "endif"}, &end));
      if (end == "elif") {
        ASSIGN_OR_RETURN(auto c, ParseExpression());
        n->conditions.push_back(std::move(c));
        RETURN_IF_ERROR(ExpectBlockEnd());
      } else if (end == "else") {
        RETURN_IF_ERROR(ExpectBlockEnd());
        n->bodies.emplace_back();
        RETURN_IF_ERROR(ParseBody(&n->bodies.back(), {"endif"}, &end));
        break;
      } else {
        break;
      }
    }
  } else if (k == "for") {
    n->kind = NodeKind::kFor;
    RETURN_IF_ERROR(ParseTargets(&n->targets));
    if (!IsName("in")) return Error(Peek(), "expected 'in'");
    Next();
    ASSIGN_OR_RETURN(auto iter, ParseTupleExpr(/*allow_cond=*/false));
    n->expr = std::move(iter);
    if (IsName("if")) {
      Next();
      ASSIGN_OR_RETURN(auto c, ParseExpression());
      n->cond = std::move(c);
    }
    if (IsName("recursive")) return Error(Peek(), "recursive loops are not supported");
    RETURN_IF_ERROR(ExpectBlockEnd());
    ++loop_depth_;
    n->bodies.emplace_back();
    RETURN_IF_ERROR(ParseBody(&n->bodies.back(), {"else", "endfor"}, &end));
    --loop_depth_;
    if (end == "else") {
      RETURN_IF_ERROR(ExpectBlockEnd());
      n->bodies.emplace_back();
      RETURN_IF_ERROR(ParseBody(&n->bodies.back(), {"endfor"}, &end));
    }
  } else if (k == "set") {
    n->kind = NodeKind::kSet;
    ASSIGN_OR_RETURN(auto first, ExpectName());
    if (IsOp(".")) {
      Next();
      ASSIGN_OR_RETURN(auto attr, ExpectName());
      n->targets.push_back(first);
      n->text = attr;
    } else {
      n->targets.push_back(first);
      while (IsOp(",")) {
        Next();
        ASSIGN_OR_RETURN(auto more, ExpectName());
        n->targets.push_back(more);
      }
    }
    if (IsOp("=")) {
      Next();
      ASSIGN_OR_RETURN(auto v, ParseTupleExpr());
      n->expr = std::move(v);
    } else {
      if (!n->text.empty() || n->targets.size() != 1) {
        return Error(Peek(), "expected '='");
      }
      RETURN_IF_ERROR(ExpectBlockEnd());
      n->bodies.emplace_back();
      RETURN_IF_ERROR(ParseBody(&n->bodies.back(), {"endset"}, &end));
    }
  } else if (k == "macro") {
    n->kind = NodeKind::kMacro;
    ASSIGN_OR_RETURN(auto name, ExpectName());
    n->text = name;
    RETURN_IF_ERROR(ParseParams(&n->params));
    RETURN_IF_ERROR(ExpectBlockEnd());
    int saved_loops = loop_depth_;
    loop_depth_ = 0;
    n->bodies.emplace_back();
    RETURN_IF_ERROR(ParseBody(&n->bodies.back(), {"endmacro"}, &end));
    loop_depth_ = saved_loops;
  } else if (k == "call") {
    n->kind = NodeKind::kCallBlock;
    if (IsOp("(")) RETURN_IF_ERROR(ParseParams(&n->params));
    ASSIGN_OR_RETURN(auto call, ParseExpression());
    if (call->kind != ExprKind::kCall) return Error(kw, "expected a call after 'call'");
    n->expr = std::move(call);
    RETURN_IF_ERROR(ExpectBlockEnd());
    n->bodies.emplace_back();
    RETURN_IF_ERROR(ParseBody(&n->bodies.back(), {"endcall"}, &end));
  } else if (k == "filter") {
    n->kind = NodeKind::kFilterBlock;
    ExprPtr chain = nullptr;
    do {
      if (chain) Next();  // '|'
      ASSIGN_OR_RETURN(auto f, ParseFilter(std::move(chain)));
      chain = std::move(f);
    } while (IsOp("|"));
    n->expr = std::move(chain);
    RETURN_IF_ERROR(ExpectBlockEnd());
    n->bodies.emplace_back();
    RETURN_IF_ERROR(ParseBody(&n->bodies.back(), {"endfilter"}, &end));
  } else if (k == "generation") {
    // Hugging Face's {% generation %}: marks assistant text for masks; renders its contents.
    n->kind = NodeKind::kIf;
    n->conditions.push_back(Literal(Value::Bool(true), kw.line));
    RETURN_IF_ERROR(ExpectBlockEnd());
    n->bodies.emplace_back();
    RETURN_IF_ERROR(ParseBody(&n->bodies.back(), {"endgeneration"}, &end));
  } else if (k == "break" || k == "continue") {
    if (loop_depth_ == 0) return Error(kw, absl::StrCat("'", k, "' outside of a loop"));
    n->kind = k == "break" ? NodeKind::kBreak : NodeKind::kContinue;
  } else {
    return Error(kw, absl::StrCat("unknown statement '", k, "'"));
  }
  RETURN_IF_ERROR(ExpectBlockEnd());
  body->push_back(std::move(n));
  return absl::OkStatus();
}

absl::Status Parser::ParseTargets(std::vector<std::string>* targets) {
  bool paren = IsOp("(");
  if (paren) Next();
  do {
    if (!targets->empty()) Next();  // ','
    ASSIGN_OR_RETURN(auto name, ExpectName());
    targets->push_back(name);
  } while (IsOp(","));
  if (paren) RETURN_IF_ERROR(ExpectOp(")"));
  return absl::OkStatus();
}

absl::Status Parser::ParseParams(std::vector<std::pair<std::string, ExprPtr>>* params) {
  RETURN_IF_ERROR(ExpectOp("("));
  while (!IsOp(")")) {
    if (!params->empty()) RETURN_IF_ERROR(ExpectOp(","));
    if (IsOp(")")) break;
    ASSIGN_OR_RETURN(auto name, ExpectName());
    ExprPtr def;
    if (IsOp("=")) {
      Next();
      ASSIGN_OR_RETURN(auto d, ParseExpression());
      def = std::move(d);
    }
    params->emplace_back(name, std::move(def));
  }
  return ExpectOp(")");
}

}  // namespace parser_internal

absl::StatusOr<std::unique_ptr<const Program>> ParseTemplate(std::string_view source,
                                                             int max_depth) {
  absl::StatusOr<std::vector<Token>> tokens = Tokenize(source);
  if (!tokens.ok()) return tokens.status();
  return parser_internal::Parser(std::move(*tokens), max_depth).Run();
}

}  // namespace attnserve::server::text::jinja
