#include "server/text/jinja/interpreter.h"

#include <cmath>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"
#include "server/text/jinja/builtins.h"

namespace attnserve::server::text::jinja {

namespace {

absl::Status UndefinedError(const Value& v) {
  return absl::InvalidArgumentError(v.str().empty() ? "value is undefined" : v.str());
}

}  // namespace

Interpreter::Interpreter(const RenderLimits& limits, Value context)
    : limits_(limits), context_(std::move(context)) {}

absl::Status Interpreter::Step(int64_t n) {
  steps_ += n;
  if (steps_ > limits_.max_steps) {
    return absl::ResourceExhaustedError(
        absl::StrCat("chat template: evaluation ran past ", limits_.max_steps, " steps"));
  }
  return absl::OkStatus();
}

absl::Status Interpreter::ChargeString(int64_t bytes) {
  if (bytes > limits_.max_value_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("chat template: a string of ", bytes,
                                                     " bytes is past the limit of ",
                                                     limits_.max_value_bytes));
  }
  return Step(bytes / 256);
}

absl::Status Interpreter::ChargeList(int64_t items) {
  if (items > limits_.max_value_bytes / 16) {
    return absl::ResourceExhaustedError(absl::StrCat("chat template: a list of ", items,
                                                     " items is past the limit of ",
                                                     limits_.max_value_bytes / 16));
  }
  return Step(items / 16);
}

absl::StatusOr<std::string> Interpreter::Render(const Program& program) {
  frames_.clear();
  frames_.push_back(Frame{});
  current_ = 0;
  std::string out;
  out_ = &out;
  out_limit_ = limits_.max_output_bytes;
  absl::Status st = ExecBody(program.body);
  if (!st.ok()) {
    if (absl::StartsWith(st.message(), "chat template:")) return st;
    return absl::Status(st.code(),
                        absl::StrCat("chat template: ", st.message(), " (line ", line_, ")"));
  }
  return out;
}

// ---- scopes ----

int Interpreter::PushFrame(int parent) {
  int saved = current_;
  frames_.push_back(Frame{{}, parent});
  current_ = static_cast<int>(frames_.size()) - 1;
  return saved;
}

void Interpreter::PopFrame(int saved_current) {
  frames_.pop_back();
  current_ = saved_current;
}

const Value* Interpreter::Lookup(std::string_view name) const {
  for (int f = current_; f >= 0; f = frames_[f].parent) {
    const auto& vars = frames_[f].vars;
    for (auto it = vars.rbegin(); it != vars.rend(); ++it) {
      if (it->first == name) return &it->second;
    }
  }
  return context_.dict().Find(name);
}

void Interpreter::Assign(const std::string& name, Value v) {
  for (auto& [k, old] : frames_[current_].vars) {
    if (k == name) {
      old = std::move(v);
      return;
    }
  }
  frames_[current_].vars.emplace_back(name, std::move(v));
}

// ---- statements ----

absl::Status Interpreter::Emit(std::string_view text) {
  if (static_cast<int64_t>(out_->size() + text.size()) > out_limit_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("chat template: output past the limit of ", out_limit_, " bytes"));
  }
  out_->append(text);
  return Step(static_cast<int64_t>(text.size()) / 256);
}

absl::Status Interpreter::ExecBody(const Body& body) {
  if (++depth_ > limits_.max_depth * 16) {
    return absl::ResourceExhaustedError(
        absl::StrCat("chat template: recursion deeper than ", limits_.max_depth * 16));
  }
  for (const auto& n : body) {
    RETURN_IF_ERROR(Exec(*n));
    if (flow_ != Flow::kNormal) break;
  }
  --depth_;
  return absl::OkStatus();
}

absl::StatusOr<std::string> Interpreter::Capture(const Body& body, int frame_parent) {
  std::string buf;
  std::string* saved_out = out_;
  int64_t saved_limit = out_limit_;
  out_ = &buf;
  out_limit_ = limits_.max_value_bytes;
  int saved = frame_parent >= -1 ? PushFrame(frame_parent) : current_;
  absl::Status st = ExecBody(body);
  if (frame_parent >= -1) PopFrame(saved);
  out_ = saved_out;
  out_limit_ = saved_limit;
  if (!st.ok()) return st;
  return buf;
}

absl::Status Interpreter::Exec(const Node& n) {
  RETURN_IF_ERROR(Step());
  line_ = n.line;
  switch (n.kind) {
    case NodeKind::kText:
      return Emit(n.text);
    case NodeKind::kOutput: {
      ASSIGN_OR_RETURN(auto v, Eval(*n.expr));
      if (v.is_string()) return Emit(v.str());
      return Emit(v.ToString());
    }
    case NodeKind::kIf: {
      for (size_t i = 0; i < n.conditions.size(); ++i) {
        ASSIGN_OR_RETURN(auto c, Eval(*n.conditions[i]));
        if (c.Truthy()) return ExecBody(n.bodies[i]);
      }
      if (n.bodies.size() > n.conditions.size()) return ExecBody(n.bodies.back());
      return absl::OkStatus();
    }
    case NodeKind::kFor:
      return ExecFor(n);
    case NodeKind::kSet:
      return ExecSet(n);
    case NodeKind::kMacro: {
      const Node* macro = &n;
      Assign(n.text,
             Value::Function(n.text, [macro](Interpreter& in, ValueList& args, KwArgs& kwargs) {
               return in.CallMacro(*macro, args, kwargs, Value());
             }));
      return absl::OkStatus();
    }
    case NodeKind::kCallBlock: {
      // caller() renders the block in the scope of the call site.
      const Node* block = &n;
      int site = current_;
      Value caller = Value::Function(
          "caller",
          [block, site](Interpreter& in, ValueList& args, KwArgs&) -> absl::StatusOr<Value> {
            int saved = in.PushFrame(site);
            for (size_t i = 0; i < block->params.size() && i < args.size(); ++i) {
              in.Assign(block->params[i].first, args[i]);
            }
            absl::StatusOr<std::string> s = in.Capture(block->bodies[0], -2);
            in.PopFrame(saved);
            if (!s.ok()) return s.status();
            return Value::String(std::move(*s));
          });
      const Expr& call = *n.expr;
      ASSIGN_OR_RETURN(auto callee, Eval(*call.args[0]));
      ValueList args;
      KwArgs kwargs;
      RETURN_IF_ERROR(EvalArgs(call, 1, &args, &kwargs));
      kwargs.emplace_back("caller", caller);
      ASSIGN_OR_RETURN(auto r, Call(callee, args, kwargs));
      return Emit(r.ToString());
    }
    case NodeKind::kFilterBlock: {
      ASSIGN_OR_RETURN(auto text, Capture(n.bodies[0], current_));
      Value input = Value::String(std::move(text));
      ASSIGN_OR_RETURN(auto r, EvalFilter(*n.expr, &input));
      return Emit(r.ToString());
    }
    case NodeKind::kBreak:
      flow_ = Flow::kBreak;
      return absl::OkStatus();
    case NodeKind::kContinue:
      flow_ = Flow::kContinue;
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::Status Interpreter::ExecFor(const Node& n) {
  ASSIGN_OR_RETURN(auto iterable, Eval(*n.expr));
  ValueList items;
  if (iterable.is_list()) {
    if (iterable.use_count() == 1) {
      items = std::move(iterable.list());  // a temporary (range(n), a filter's result)
    } else {
      items = iterable.list();
    }
  } else if (iterable.is_dict() && !iterable.is_namespace()) {
    for (const auto& [k, v] : iterable.dict().items) items.push_back(k);
  } else if (iterable.is_string()) {
    const std::string& s = iterable.str();
    std::vector<size_t> off = Utf8Offsets(s);
    for (size_t i = 0; i + 1 < off.size(); ++i) {
      items.push_back(Value::String(s.substr(off[i], off[i + 1] - off[i])));
    }
  } else if (!iterable.is_undefined()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", iterable.TypeName(), "' object is not iterable"));
  }
  auto bind = [&](const Value& item) -> absl::Status {
    if (n.targets.size() == 1) {
      Assign(n.targets[0], item);
      return absl::OkStatus();
    }
    if (!item.is_list() || item.list().size() != n.targets.size()) {
      return absl::InvalidArgumentError(absl::StrCat("cannot unpack ", item.TypeName(), " into ",
                                                     n.targets.size(), " loop variables"));
    }
    for (size_t i = 0; i < n.targets.size(); ++i) Assign(n.targets[i], item.list()[i]);
    return absl::OkStatus();
  };
  if (n.cond) {
    ValueList kept;
    for (const Value& item : items) {
      RETURN_IF_ERROR(Step());
      int saved = PushFrame(current_);
      absl::Status st = bind(item);
      absl::StatusOr<Value> c = st.ok() ? Eval(*n.cond) : absl::StatusOr<Value>(st);
      PopFrame(saved);
      if (!c.ok()) return c.status();
      if (c->Truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    if (n.bodies.size() > 1) return ExecBody(n.bodies[1]);
    return absl::OkStatus();
  }
  const int64_t len = static_cast<int64_t>(items.size());
  // One loop object per loop, updated in place each iteration (no allocation per iteration).
  static const char* kKeys[] = {"index",  "index0", "revindex", "revindex0", "first",   "last",
                                "length", "depth",  "depth0",   "previtem",  "nextitem"};
  Value loop = Value::Dict();
  auto& d = loop.dict().items;
  for (const char* k : kKeys) d.emplace_back(Value::String(k), Value());
  d[6].second = Value::Int(len);
  d[7].second = Value::Int(1);
  d[8].second = Value::Int(0);
  const Value no_prev = Value::Undefined("there is no previous item");
  const Value no_next = Value::Undefined("there is no next item");
  // One frame for the whole loop, emptied at each iteration (Jinja's per-iteration scope).
  int saved = PushFrame(current_);
  for (int64_t i = 0; i < len; ++i) {
    absl::Status st = Step();
    if (!st.ok()) {
      PopFrame(saved);
      return st;
    }
    frames_[current_].vars.clear();
    d[0].second = Value::Int(i + 1);
    d[1].second = Value::Int(i);
    d[2].second = Value::Int(len - i);
    d[3].second = Value::Int(len - i - 1);
    d[4].second = Value::Bool(i == 0);
    d[5].second = Value::Bool(i == len - 1);
    d[9].second = i > 0 ? items[i - 1] : no_prev;
    d[10].second = i + 1 < len ? items[i + 1] : no_next;
    Assign("loop", loop);
    st = bind(items[i]);
    if (st.ok()) st = ExecBody(n.bodies[0]);
    if (!st.ok()) {
      PopFrame(saved);
      return st;
    }
    if (flow_ == Flow::kBreak) {
      flow_ = Flow::kNormal;
      break;
    }
    flow_ = Flow::kNormal;
  }
  PopFrame(saved);
  return absl::OkStatus();
}

absl::Status Interpreter::ExecSet(const Node& n) {
  Value v;
  if (n.expr) {
    ASSIGN_OR_RETURN(auto e, Eval(*n.expr));
    v = std::move(e);
  } else {
    ASSIGN_OR_RETURN(auto text, Capture(n.bodies[0], -2));
    v = Value::String(std::move(text));
  }
  if (!n.text.empty()) {
    const Value* ns = Lookup(n.targets[0]);
    if (ns == nullptr || !ns->is_namespace()) {
      return absl::InvalidArgumentError("cannot assign attribute on non-namespace object");
    }
    ns->dict().Set(Value::String(n.text), std::move(v));
    return absl::OkStatus();
  }
  if (n.targets.size() == 1) {
    Assign(n.targets[0], std::move(v));
    return absl::OkStatus();
  }
  if (!v.is_list() || v.list().size() != n.targets.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot unpack ", v.TypeName(), " into ", n.targets.size(), " names"));
  }
  for (size_t i = 0; i < n.targets.size(); ++i) Assign(n.targets[i], v.list()[i]);
  return absl::OkStatus();
}

absl::StatusOr<Value> Interpreter::CallMacro(const Node& m, ValueList& args, KwArgs& kwargs,
                                             const Value&) {
  if (macro_depth_ >= limits_.max_depth) {
    return absl::ResourceExhaustedError(
        absl::StrCat("chat template: macro calls nested deeper than ", limits_.max_depth));
  }
  if (args.size() > m.params.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("macro '", m.text, "' takes not more than ", m.params.size(), " argument(s)"));
  }
  int saved = PushFrame(0);
  absl::Status st;
  Value caller;
  for (auto& [k, v] : kwargs) {
    bool known = k == "caller";
    for (const auto& p : m.params) known = known || p.first == k;
    if (!known) {
      st = absl::InvalidArgumentError(
          absl::StrCat("macro '", m.text, "' takes no keyword argument '", k, "'"));
    }
    if (k == "caller") caller = v;
  }
  if (!caller.is_undefined()) Assign("caller", caller);
  for (size_t i = 0; st.ok() && i < m.params.size(); ++i) {
    const auto& [name, def] = m.params[i];
    if (i < args.size()) {
      Assign(name, args[i]);
      continue;
    }
    bool found = false;
    for (auto& [k, v] : kwargs) {
      if (k == name) {
        Assign(name, v);
        found = true;
      }
    }
    if (found) continue;
    if (def) {
      absl::StatusOr<Value> d = Eval(*def);
      if (!d.ok()) {
        st = d.status();
        break;
      }
      Assign(name, std::move(*d));
    } else {
      Assign(name, Value::Undefined(absl::StrCat("parameter '", name, "' was not provided")));
    }
  }
  ++macro_depth_;
  int saved_line = line_;
  absl::StatusOr<std::string> out =
      st.ok() ? Capture(m.bodies[0], -2) : absl::StatusOr<std::string>(st);
  --macro_depth_;
  PopFrame(saved);
  if (!out.ok()) return out.status();
  line_ = saved_line;
  flow_ = Flow::kNormal;
  return Value::String(std::move(*out));
}

absl::StatusOr<Value> Interpreter::Call(const Value& callee, ValueList& args, KwArgs& kwargs) {
  if (callee.is_callable()) return callee.callable().fn(*this, args, kwargs);
  if (callee.is_undefined()) return UndefinedError(callee);
  return absl::InvalidArgumentError(
      absl::StrCat("'", callee.TypeName(), "' object is not callable"));
}

}  // namespace attnserve::server::text::jinja
