// The tree-walking interpreter: renders a Program against a context, within limits.
//
// Threads: one Interpreter per render (not thread-safe); the Program it reads is immutable and may
// be shared by many interpreters on many threads at once.
// Limits: every statement, expression node and loop iteration is a step; every 256 bytes of a
// string built is a step too, so the work of a render is bounded by max_steps. Output, captured
// text and every string/list built are bounded by the byte limits; recursion by max_depth.
#ifndef ATTNSERVE_SERVER_TEXT_JINJA_INTERPRETER_H_
#define ATTNSERVE_SERVER_TEXT_JINJA_INTERPRETER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/text/jinja/ast.h"
#include "server/text/jinja/value.h"

namespace attnserve::server::text::jinja {

struct RenderLimits {
  int64_t max_output_bytes = 1 << 20;
  int64_t max_steps = 1'000'000;
  int max_depth = 64;
  int64_t max_value_bytes = 1 << 20;
};

class Interpreter {
 public:
  // `context` (a dict) holds the render's variables and globals; it is read, never modified.
  Interpreter(const RenderLimits& limits, Value context);

  // INVALID_ARGUMENT (messages "chat template: ... (line N)") for runtime errors;
  // RESOURCE_EXHAUSTED when a limit is hit.
  absl::StatusOr<std::string> Render(const Program& program);

  // For builtins (filters, tests, methods, globals).
  absl::Status Step(int64_t n = 1);
  // Checks a string about to be built (bytes) and charges its work.
  absl::Status ChargeString(int64_t bytes);
  // Checks a list about to be built (items).
  absl::Status ChargeList(int64_t items);
  absl::StatusOr<Value> Call(const Value& callee, ValueList& args, KwArgs& kwargs);
  const RenderLimits& limits() const { return limits_; }

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  struct Frame {
    std::vector<std::pair<std::string, Value>> vars;
    int parent = -1;
  };

  absl::Status ExecBody(const Body& body);
  absl::Status Exec(const Node& node);
  absl::Status ExecFor(const Node& node);
  absl::Status ExecSet(const Node& node);
  absl::Status Emit(std::string_view text);
  absl::StatusOr<std::string> Capture(const Body& body, int frame_parent);
  absl::StatusOr<Value> CallMacro(const Node& macro, ValueList& args, KwArgs& kwargs,
                                  const Value& caller);

  absl::StatusOr<Value> Eval(const Expr& e);
  absl::StatusOr<Value> EvalInner(const Expr& e);
  absl::StatusOr<Value> EvalBinary(const Expr& e);
  absl::StatusOr<Value> EvalCall(const Expr& e);
  absl::StatusOr<Value> EvalFilter(const Expr& e, const Value* block_input);
  absl::StatusOr<Value> EvalSlice(const Expr& e);
  absl::Status EvalArgs(const Expr& e, size_t first, ValueList* args, KwArgs* kwargs);

  const Value* Lookup(std::string_view name) const;
  void Assign(const std::string& name, Value v);
  int PushFrame(int parent);
  void PopFrame(int saved_current);

  RenderLimits limits_;
  Value context_;
  std::vector<Frame> frames_;
  int current_ = -1;
  std::string* out_ = nullptr;
  int64_t out_limit_ = 0;
  int64_t steps_ = 0;
  int depth_ = 0;
  int macro_depth_ = 0;
  int line_ = 0;
  Flow flow_ = Flow::kNormal;
};

}  // namespace attnserve::server::text::jinja

#endif  // ATTNSERVE_SERVER_TEXT_JINJA_INTERPRETER_H_
