#include "server/policy.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "server/client_text.h"

namespace attnserve::server {
namespace {

// Rule `i` of `rules` in words ("standard up to 4095 tokens", "mamba beyond", "rwkv at any
// length" when no bounded rule comes before it).
std::string RuleText(const std::vector<PolicyRule>& rules, size_t i) {
  const PolicyRule& rule = rules[i];
  if (rule.unbounded) return absl::StrCat(rule.variant, " for streams of unknown length");
  if (rule.max_tokens > 0) return absl::StrCat(rule.variant, " up to ", rule.max_tokens, " tokens");
  const bool after_a_bound = std::any_of(rules.begin(), rules.begin() + i, [](const PolicyRule& r) {
    return !r.unbounded && r.max_tokens > 0;
  });
  return absl::StrCat(rule.variant, after_a_bound ? " beyond" : " at any length");
}

absl::StatusOr<std::vector<PolicyRule>> ParseJsonRules(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("policy file ", path, " cannot be read"));
  std::stringstream ss;
  ss << in.rdbuf();
  google::protobuf::Struct root;
  if (!google::protobuf::util::JsonStringToMessage(ss.str(), &root).ok()) {
    return absl::InvalidArgumentError(absl::StrCat("policy file ", path, " is not JSON"));
  }
  auto it = root.fields().find("rules");
  if (it == root.fields().end() || !it->second.has_list_value()) {
    return absl::InvalidArgumentError(absl::StrCat("policy file ", path,
                                                   ": expected {\"rules\": [{\"variant\": ..., "
                                                   "\"max_tokens\": ...}, ...]}"));
  }
  std::vector<PolicyRule> rules;
  for (const auto& v : it->second.list_value().values()) {
    const auto& f = v.struct_value().fields();
    PolicyRule rule;
    if (auto variant = f.find("variant"); variant != f.end()) {
      rule.variant = variant->second.string_value();
    }
    if (auto max = f.find("max_tokens"); max != f.end()) {
      rule.max_tokens = static_cast<int64_t>(max->second.number_value());
    }
    if (auto unbounded = f.find("unbounded"); unbounded != f.end()) {
      rule.unbounded = unbounded->second.bool_value();
    }
    rules.push_back(rule);
  }
  return rules;
}

}  // namespace

absl::StatusOr<Policy> Policy::Parse(const std::string& spec,
                                     const model::ModelRepository& repository) {
  Policy policy;
  policy.repository_ = &repository;
  if (absl::StartsWith(spec, "@")) {
    absl::StatusOr<std::vector<PolicyRule>> rules = ParseJsonRules(spec.substr(1));
    if (!rules.ok()) return rules.status();
    policy.rules_ = *std::move(rules);
  } else {
    for (absl::string_view part : absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
      std::vector<std::string> fields = absl::StrSplit(absl::StripAsciiWhitespace(part), ':');
      PolicyRule rule;
      rule.variant = fields[0];
      rule.unbounded = fields.size() == 2 && fields[1] == "unbounded";
      if (fields.size() > 2 || (fields.size() == 2 && !rule.unbounded &&
                                !absl::SimpleAtoi(fields[1], &rule.max_tokens))) {
        return absl::InvalidArgumentError(absl::StrCat(
            "policy rule '", part, "': expected variant, variant:max_tokens or variant:unbounded"));
      }
      policy.rules_.push_back(rule);
    }
  }
  if (policy.rules_.empty()) return absl::InvalidArgumentError("policy has no rules");
  for (size_t i = 0; i < policy.rules_.size(); ++i) {
    const PolicyRule& rule = policy.rules_[i];
    if (repository.Find(rule.variant) == nullptr) {
      std::vector<std::string> names;
      for (const model::Model* m : repository.models()) names.push_back(m->name());
      return absl::InvalidArgumentError(absl::StrCat("policy rule ", i + 1, ": no model '",
                                                     rule.variant,
                                                     "'; models: ", absl::StrJoin(names, ", ")));
    }
    if (rule.max_tokens < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("policy rule ", i + 1, ": max_tokens must be >= 0 (0: no bound)"));
    }
    if (rule.unbounded && rule.max_tokens > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("policy rule ", i + 1,
                       ": an unbounded rule (streams of unknown length) has no max_tokens"));
    }
    if (rule.unbounded && !repository.Find(rule.variant)->can_stream()) {
      return absl::InvalidArgumentError(absl::StrCat("policy rule ", i + 1, ": '", rule.variant,
                                                     "' cannot stream, so it cannot serve "
                                                     "streams of unknown length"));
    }
  }
  if (std::all_of(policy.rules_.begin(), policy.rules_.end(),
                  [](const PolicyRule& rule) { return rule.unbounded; })) {
    return absl::InvalidArgumentError(
        "policy has only unbounded rules: add one for requests of a known length (Infer, and "
        "streams that declare an expected length)");
  }
  return policy;
}

absl::StatusOr<Policy> Policy::ParseDefault(const model::ModelRepository& repository,
                                            std::vector<std::string>* dropped) {
  if (repository.models().empty()) {
    return absl::InvalidArgumentError("the model repository has no models");
  }
  std::vector<PolicyRule> kept;
  for (absl::string_view part : absl::StrSplit(kDefaultSpec, ',')) {
    std::vector<std::string> fields = absl::StrSplit(part, ':');
    PolicyRule rule;
    rule.variant = fields[0];
    rule.unbounded = fields.size() == 2 && fields[1] == "unbounded";
    if (fields.size() == 2 && !rule.unbounded) absl::SimpleAtoi(fields[1], &rule.max_tokens);
    if (repository.Find(rule.variant) != nullptr) {
      kept.push_back(rule);
    } else if (dropped != nullptr) {
      dropped->push_back(rule.variant);
    }
  }
  // Every length some model takes has a rule: past the last bound, the model that takes the
  // longest requests (the first such in the repository's order).
  const bool open_ended = std::any_of(kept.begin(), kept.end(), [](const PolicyRule& r) {
    return !r.unbounded && r.max_tokens == 0;
  });
  if (!open_ended) {
    const model::Model* longest = nullptr;
    for (const model::Model* m : repository.models()) {
      if (longest == nullptr || m->max_sequence_length() > longest->max_sequence_length()) {
        longest = m;
      }
    }
    auto last_bounded =
        std::find_if(kept.rbegin(), kept.rend(), [](const PolicyRule& r) { return !r.unbounded; });
    if (last_bounded != kept.rend() && last_bounded->variant == longest->name()) {
      last_bounded->max_tokens = 0;  // its bound lifted rather than a second rule
    } else {
      kept.push_back(PolicyRule{longest->name(), 0, false});
    }
  }
  std::vector<std::string> spec;
  for (const PolicyRule& r : kept) {
    spec.push_back(r.unbounded        ? absl::StrCat(r.variant, ":unbounded")
                   : r.max_tokens > 0 ? absl::StrCat(r.variant, ":", r.max_tokens)
                                      : r.variant);
  }
  return Parse(absl::StrJoin(spec, ","), repository);
}

absl::StatusOr<PolicyDecision> Policy::Choose(int64_t length, bool stream) const {
  auto decide = [&](size_t i) {
    PolicyDecision d;
    d.model = repository_->Find(rules_[i].variant);
    d.rule = static_cast<int>(i + 1);
    d.reason =
        absl::StrCat("rule ", i + 1, ": ", RuleText(rules_, i),
                     " (request: ", length > 0 ? absl::StrCat(length, " tokens") : "unknown length",
                     stream ? ", streaming" : "", ")");
    return d;
  };
  if (stream && length <= 0) {
    for (size_t i = 0; i < rules_.size(); ++i) {
      if (rules_[i].unbounded) return decide(i);  // Parse checked that it streams
    }
  }
  bool fits_some = false;
  for (size_t i = 0; i < rules_.size(); ++i) {
    const PolicyRule& rule = rules_[i];
    const model::Model* m = repository_->Find(rule.variant);
    if (rule.unbounded) continue;
    if (rule.max_tokens > 0 && length > rule.max_tokens) continue;
    if (length > m->max_sequence_length()) continue;
    fits_some = true;
    if (stream && !m->can_stream()) continue;
    return decide(i);
  }
  if (!fits_some) {
    return absl::ResourceExhaustedError(
        absl::StrCat("no variant takes ", length, " tokens under the policy ", Describe()));
  }
  return absl::FailedPreconditionError(absl::StrCat("no variant that can stream takes ", length,
                                                    " tokens under the policy ", Describe(),
                                                    "; only causal variants stream"));
}

absl::StatusOr<PolicyDecision> Policy::Resolve(const std::string& name, int64_t length,
                                               bool stream) const {
  if (name.empty() || name == "auto") return Choose(length, stream);
  const model::Model* m = repository_->Find(name);
  if (m == nullptr) {
    std::vector<std::string> names;
    for (const model::Model* model : repository_->models()) names.push_back(model->name());
    return absl::NotFoundError(absl::StrCat("no model ", ClientText(name),
                                            "; models: ", absl::StrJoin(names, ", "), ", or auto"));
  }
  if (stream && !m->can_stream()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "model '", name, "' cannot stream: it is not causal; use Infer with whole sequences, ",
        "or a causal variant"));
  }
  PolicyDecision d;
  d.model = m;
  d.reason = absl::StrCat("requested by name: ", name);  // a served model's name
  return d;
}

std::string Policy::Describe() const {
  std::vector<std::string> parts;
  for (size_t i = 0; i < rules_.size(); ++i) parts.push_back(RuleText(rules_, i));
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

}  // namespace attnserve::server
