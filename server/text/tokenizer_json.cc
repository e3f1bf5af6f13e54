#include "server/text/tokenizer_json.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace attnserve::server::text {
namespace {

using google::protobuf::ListValue;
using google::protobuf::Struct;
using google::protobuf::Value;

absl::Status Unsupported(absl::string_view component, absl::string_view type,
                         absl::string_view supported) {
  return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", component, " ", type,
                                                 " is not supported (supported: ", supported, ")"));
}

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", what));
}

const Value* Field(const Struct& s, absl::string_view name) {
  const auto it = s.fields().find(std::string(name));
  if (it == s.fields().end() || it->second.has_null_value()) return nullptr;
  return &it->second;
}

bool BoolField(const Struct& s, absl::string_view name, bool fallback) {
  const Value* v = Field(s, name);
  return v != nullptr && v->has_bool_value() ? v->bool_value() : fallback;
}

std::string TypeOf(const Struct& s) {
  const Value* v = Field(s, "type");
  return v != nullptr && v->has_string_value() ? v->string_value() : "";
}

absl::StatusOr<std::unique_ptr<Normalizer>> BuildNormalizer(const Struct& s) {
  const std::string type = TypeOf(s);
  if (type == "NFC") return MakeUnicodeNormalizer(UnicodeForm::kNfc);
  if (type == "NFD") return MakeUnicodeNormalizer(UnicodeForm::kNfd);
  if (type == "NFKC") return MakeUnicodeNormalizer(UnicodeForm::kNfkc);
  if (type == "NFKD") return MakeUnicodeNormalizer(UnicodeForm::kNfkd);
  if (type == "Sequence") {
    const Value* list = Field(s, "normalizers");
    if (list == nullptr || !list->has_list_value())
      return Malformed("normalizer Sequence without normalizers");
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const Value& v : list->list_value().values()) {
      if (!v.has_struct_value()) return Malformed("normalizer Sequence: an entry is not an object");
      auto step = BuildNormalizer(v.struct_value());
      if (!step.ok()) return step.status();
      steps.push_back(std::move(*step));
    }
    return MakeNormalizerSequence(std::move(steps));
  }
  return Unsupported("normalizer", type, "NFC, NFD, NFKC, NFKD, Sequence");
}

absl::StatusOr<SplitBehavior> ParseBehavior(const Struct& s) {
  const Value* v = Field(s, "behavior");
  const std::string b = v != nullptr && v->has_string_value() ? v->string_value() : "Isolated";
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  return Unsupported("pre_tokenizer Split behavior", b,
                     "Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> BuildPreTokenizer(const Struct& s) {
  const std::string type = TypeOf(s);
  if (type == "ByteLevel") {
    return MakeByteLevel(BoolField(s, "add_prefix_space", false), BoolField(s, "use_regex", true));
  }
  if (type == "Split") {
    const Value* pattern = Field(s, "pattern");
    if (pattern == nullptr || !pattern->has_struct_value())
      return Malformed("pre_tokenizer Split without a pattern");
    const Value* regex = Field(pattern->struct_value(), "Regex");
    const Value* literal = Field(pattern->struct_value(), "String");
    const Value* p = regex != nullptr ? regex : literal;
    if (p == nullptr || !p->has_string_value())
      return Malformed("pre_tokenizer Split: pattern is neither Regex nor String");
    auto compiled = Regex::Compile(p->string_value(), /*literal=*/regex == nullptr);
    if (!compiled.ok())
      return Malformed(absl::StrCat("pre_tokenizer Split: ", compiled.status().message()));
    auto behavior = ParseBehavior(s);
    if (!behavior.ok()) return behavior.status();
    return MakeSplit(std::move(*compiled), *behavior, BoolField(s, "invert", false));
  }
  if (type == "Sequence") {
    const Value* list = Field(s, "pretokenizers");
    if (list == nullptr || !list->has_list_value())
      return Malformed("pre_tokenizer Sequence without pretokenizers");
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    const int n = list->list_value().values_size();
    for (int i = 0; i < n; ++i) {
      const Value& v = list->list_value().values(i);
      if (!v.has_struct_value())
        return Malformed("pre_tokenizer Sequence: an entry is not an object");
      auto step = BuildPreTokenizer(v.struct_value());
      if (!step.ok()) return step.status();
      if ((*step)->byte_level() && i + 1 < n) {
        return Unsupported("pre_tokenizer Sequence", "with a step after ByteLevel",
                           "ByteLevel last");
      }
      steps.push_back(std::move(*step));
    }
    return MakeSequence(std::move(steps));
  }
  return Unsupported("pre_tokenizer", type, "ByteLevel, Split, Sequence");
}

absl::StatusOr<std::string> StringOf(const Value& v, absl::string_view what) {
  if (!v.has_string_value()) return Malformed(absl::StrCat(what, " is not a string"));
  return v.string_value();
}

absl::StatusOr<std::unique_ptr<BpeModel>> BuildModel(const Struct& s) {
  const std::string type = TypeOf(s);
  if (type != "BPE" && !(type.empty() && Field(s, "merges") != nullptr)) {
    return Unsupported("model", type.empty() ? "(no type)" : type, "BPE");
  }
  if (const Value* d = Field(s, "dropout");
      d != nullptr && d->has_number_value() && d->number_value() != 0) {
    return Unsupported("model BPE", "dropout", "none: encoding must be deterministic");
  }
  for (const char* f : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const Value* v = Field(s, f);
        v != nullptr && !(v->has_string_value() && v->string_value().empty())) {
      return Unsupported("model BPE", f, "none");
    }
  }
  BpeOptions options;
  options.byte_fallback = BoolField(s, "byte_fallback", false);
  options.ignore_merges = BoolField(s, "ignore_merges", false);
  options.fuse_unk = BoolField(s, "fuse_unk", false);
  if (const Value* u = Field(s, "unk_token"); u != nullptr) {
    auto unk = StringOf(*u, "model.unk_token");
    if (!unk.ok()) return unk.status();
    options.unk_token = *unk;
  }
  const Value* vocab = Field(s, "vocab");
  if (vocab == nullptr || !vocab->has_struct_value())
    return Malformed("model.vocab is not an object");
  std::vector<std::pair<std::string, int32_t>> entries;
  entries.reserve(vocab->struct_value().fields_size());
  for (const auto& [token, id] : vocab->struct_value().fields()) {
    if (!id.has_number_value() || id.number_value() < 0 || id.number_value() >= (1 << 30) ||
        id.number_value() != static_cast<double>(static_cast<int32_t>(id.number_value()))) {
      return Malformed(absl::StrCat("model.vocab: the id of '", token, "' is not an id"));
    }
    entries.emplace_back(token, static_cast<int32_t>(id.number_value()));
  }
  std::vector<std::pair<std::string, std::string>> merges;
  if (const Value* m = Field(s, "merges"); m != nullptr) {
    if (!m->has_list_value()) return Malformed("model.merges is not a list");
    merges.reserve(m->list_value().values_size());
    for (const Value& v : m->list_value().values()) {
      if (v.has_string_value()) {
        // "a b": split at the first space (tokens never hold a space in this form).
        const std::string& pair = v.string_value();
        const size_t space = pair.find(' ', 1);
        if (space == std::string::npos)
          return Malformed(absl::StrCat("model.merges: '", pair, "' is not two tokens"));
        merges.emplace_back(pair.substr(0, space), pair.substr(space + 1));
      } else if (v.has_list_value() && v.list_value().values_size() == 2 &&
                 v.list_value().values(0).has_string_value() &&
                 v.list_value().values(1).has_string_value()) {
        merges.emplace_back(v.list_value().values(0).string_value(),
                            v.list_value().values(1).string_value());
      } else {
        return Malformed("model.merges: an entry is neither \"a b\" nor [\"a\", \"b\"]");
      }
    }
  }
  options.byte_level = true;  // checked by the caller: the pre-tokenizer ends in ByteLevel
  auto model = BpeModel::Build(entries, merges, options);
  if (!model.ok()) return Malformed(model.status().message());
  return model;
}

absl::StatusOr<std::vector<AddedToken>> BuildAddedTokens(const Value* list) {
  std::vector<AddedToken> tokens;
  if (list == nullptr) return tokens;
  if (!list->has_list_value()) return Malformed("added_tokens is not a list");
  for (const Value& v : list->list_value().values()) {
    if (!v.has_struct_value()) return Malformed("added_tokens: an entry is not an object");
    const Struct& s = v.struct_value();
    AddedToken t;
    const Value* content = Field(s, "content");
    const Value* id = Field(s, "id");
    if (content == nullptr || !content->has_string_value() || content->string_value().empty() ||
        id == nullptr || !id->has_number_value() || id->number_value() < 0 ||
        id->number_value() >= (1 << 30)) {
      return Malformed("added_tokens: an entry without a content and an id");
    }
    t.content = content->string_value();
    t.id = static_cast<int32_t>(id->number_value());
    t.special = BoolField(s, "special", false);
    t.lstrip = BoolField(s, "lstrip", false);
    t.rstrip = BoolField(s, "rstrip", false);
    t.single_word = BoolField(s, "single_word", false);
    t.normalized = BoolField(s, "normalized", !t.special);
    tokens.push_back(std::move(t));
  }
  return tokens;
}

// TemplateProcessing's "single": special tokens before and after $A.
absl::Status BuildTemplate(const Struct& s, TokenizerParts* parts) {
  const Value* single = Field(s, "single");
  if (single == nullptr || !single->has_list_value())
    return Malformed("post_processor TemplateProcessing without single");
  const Value* specials = Field(s, "special_tokens");
  bool seen_sequence = false;
  for (const Value& item : single->list_value().values()) {
    if (!item.has_struct_value())
      return Malformed("post_processor TemplateProcessing: an entry is not an object");
    const Struct& e = item.struct_value();
    if (Field(e, "Sequence") != nullptr) {
      if (seen_sequence)
        return Unsupported("post_processor TemplateProcessing", "single with two sequences",
                           "one $A");
      seen_sequence = true;
      continue;
    }
    const Value* special = Field(e, "SpecialToken");
    const Value* name = special != nullptr && special->has_struct_value()
                            ? Field(special->struct_value(), "id")
                            : nullptr;
    if (name == nullptr || !name->has_string_value())
      return Malformed(
          "post_processor TemplateProcessing: an entry is neither Sequence nor SpecialToken");
    const Value* def = specials != nullptr && specials->has_struct_value()
                           ? Field(specials->struct_value(), name->string_value())
                           : nullptr;
    const Value* ids =
        def != nullptr && def->has_struct_value() ? Field(def->struct_value(), "ids") : nullptr;
    if (ids == nullptr || !ids->has_list_value()) {
      return Malformed(absl::StrCat("post_processor TemplateProcessing: special token '",
                                    name->string_value(), "' has no ids"));
    }
    for (const Value& id : ids->list_value().values()) {
      if (!id.has_number_value() || id.number_value() < 0)
        return Malformed("post_processor TemplateProcessing: a bad id");
      (seen_sequence ? parts->template_suffix : parts->template_prefix)
          .push_back(static_cast<int32_t>(id.number_value()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromJson(absl::string_view json) {
  Struct root;
  if (auto status = google::protobuf::util::JsonStringToMessage(std::string(json), &root);
      !status.ok()) {
    return Malformed(absl::StrCat("not JSON: ", std::string(status.message()).substr(0, 200)));
  }
  TokenizerParts parts;
  if (const Value* n = Field(root, "normalizer"); n != nullptr) {
    if (!n->has_struct_value()) return Malformed("normalizer is not an object");
    auto normalizer = BuildNormalizer(n->struct_value());
    if (!normalizer.ok()) return normalizer.status();
    parts.normalizer = std::move(*normalizer);
  }
  const Value* p = Field(root, "pre_tokenizer");
  if (p == nullptr || !p->has_struct_value()) {
    return Unsupported("pre_tokenizer", "null", "ByteLevel, or a Sequence ending in it");
  }
  auto pre = BuildPreTokenizer(p->struct_value());
  if (!pre.ok()) return pre.status();
  if (!(*pre)->byte_level()) {
    return Unsupported("pre_tokenizer", TypeOf(p->struct_value()) + " without ByteLevel last",
                       "ByteLevel, or a Sequence ending in it");
  }
  parts.pre_tokenizer = std::move(*pre);
  const Value* d = Field(root, "decoder");
  const std::string decoder =
      d != nullptr && d->has_struct_value() ? TypeOf(d->struct_value()) : "null";
  if (decoder != "ByteLevel") return Unsupported("decoder", decoder, "ByteLevel");
  if (const Value* pp = Field(root, "post_processor"); pp != nullptr) {
    const std::string type = pp->has_struct_value() ? TypeOf(pp->struct_value()) : "";
    if (type == "TemplateProcessing") {
      if (absl::Status s = BuildTemplate(pp->struct_value(), &parts); !s.ok()) return s;
    } else if (type != "ByteLevel") {
      return Unsupported("post_processor", type, "ByteLevel, TemplateProcessing");
    }
  }
  const Value* m = Field(root, "model");
  if (m == nullptr || !m->has_struct_value()) return Malformed("no model");
  auto model = BuildModel(m->struct_value());
  if (!model.ok()) return model.status();
  parts.model = std::move(*model);
  auto added = BuildAddedTokens(Field(root, "added_tokens"));
  if (!added.ok()) return added.status();
  parts.added_tokens = std::move(*added);
  return std::make_unique<Tokenizer>(std::move(parts));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  auto tokenizer = TokenizerFromJson(buffer.str());
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(),
                        absl::StrCat(path, ": ", tokenizer.status().message()));
  }
  return tokenizer;
}

}  // namespace attnserve::server::text
