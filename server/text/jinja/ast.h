// The syntax tree of a parsed template. Immutable after parsing; shared by every render.
#ifndef ATTNSERVE_SERVER_TEXT_JINJA_AST_H_
#define ATTNSERVE_SERVER_TEXT_JINJA_AST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "server/text/jinja/value.h"

namespace attnserve::server::text::jinja {

enum class ExprKind {
  kLiteral,    // literal
  kName,       // name
  kList,       // args: items
  kTuple,      // args: items
  kDict,       // args: key0, value0, key1, value1, ...
  kAttr,       // args[0].name
  kSubscript,  // args[0][args[1]]
  kSlice,      // args[0][args[1]:args[2]:args[3]] (null when absent)
  kCall,       // args[0](args[1..], kwargs)
  kFilter,     // args[0] | name(args[1..], kwargs)
  kTest,       // args[0] is [not] name(args[1..])
  kUnary,      // name: "not", "-", "+"; args[0]
  kBinary,     // name: operator; args[0], args[1]
  kCond,       // args[0] if args[1] else args[2] (args[2] null without else)
};

struct Expr;
using ExprPtr = std::unique_ptr<const Expr>;

struct Expr {
  ExprKind kind;
  int line = 0;
  Value literal;
  std::string name;
  bool negated = false;  // kTest: `is not`
  int depth = 1;         // height of this subtree
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

enum class NodeKind {
  kText,         // text
  kOutput,       // {{ expr }}
  kIf,           // conditions[i] -> bodies[i]; bodies.back() is the else body when it has one more
  kFor,          // for targets in expr [if cond]: bodies[0], else bodies[1]
  kSet,          // set targets (or attr) = expr; or block set: bodies[0]
  kMacro,        // macro name(params): bodies[0]
  kCallBlock,    // call expr: bodies[0] is the caller
  kFilterBlock,  // filter expr (a kFilter chain over a null input): bodies[0]
  kBreak,
  kContinue,
};

struct Node;
using Body = std::vector<std::unique_ptr<const Node>>;

struct Node {
  NodeKind kind;
  int line = 0;
  std::string text;                  // kText; kMacro name; kSet namespace attribute
  ExprPtr expr;                      // kOutput, kFor iterable, kSet value, kCallBlock call
  ExprPtr cond;                      // kFor inline filter
  std::vector<ExprPtr> conditions;   // kIf
  std::vector<std::string> targets;  // kFor / kSet names (more than one: tuple unpacking)
  std::vector<std::pair<std::string, ExprPtr>> params;  // kMacro (default may be null)
  std::vector<Body> bodies;
};

struct Program {
  Body body;
};

}  // namespace attnserve::server::text::jinja

#endif  // ATTNSERVE_SERVER_TEXT_JINJA_AST_H_
