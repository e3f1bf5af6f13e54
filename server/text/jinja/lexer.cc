#include "server/text/jinja/lexer.h"

#include <cctype>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace attnserve::server::text::jinja {
namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xc0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xe0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    *out += static_cast<char>(0xf0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {}

  absl::StatusOr<std::vector<Token>> Run() {
    bool line_starting = true;
    bool strip_leading = false;  // the previous tag ended with `-`
    while (pos_ < src_.size()) {
      size_t tag = FindTagStart(pos_);
      std::string text = src_.substr(pos_, (tag == std::string::npos ? src_.size() : tag) - pos_);
      int text_line = line_, text_col = col_;
      if (strip_leading) {
        size_t i = 0;
        while (i < text.size() && IsSpace(text[i])) ++i;
        text.erase(0, i);
      }
      if (tag == std::string::npos) {
        Advance(src_.size() - pos_);
        Emit(TokenType::kText, std::move(text), text_line, text_col);
        break;
      }
      char kind = src_[tag + 1];
      char modifier = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (modifier == '-') {
        while (!text.empty() && IsSpace(text.back())) text.pop_back();
      } else if (modifier != '+' && (kind == '%' || kind == '#')) {
        // lstrip_blocks: drop the spaces before a block or comment tag that starts a line.
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if (l_pos > 0 || line_starting) {
          bool blank = true;
          for (size_t i = l_pos; i < text.size(); ++i) blank = blank && IsSpace(text[i]);
          if (blank) text.resize(l_pos);
        }
      }
      Advance(tag - pos_);
      Emit(TokenType::kText, std::move(text), text_line, text_col);
      int tag_line = line_, tag_col = col_;
      Advance(2 + ((modifier == '-' || modifier == '+') ? 1 : 0));
      char end_modifier = '\0';
      if (kind == '#') {
        size_t end = src_.find("#}", pos_);
        if (end == std::string::npos) return Error(tag_line, tag_col, "unterminated comment");
        if (end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+')) {
          end_modifier = src_[end - 1];
        }
        Advance(end + 2 - pos_);
      } else {
        Emit(kind == '{' ? TokenType::kVarBegin : TokenType::kBlockBegin, "", tag_line, tag_col);
        absl::StatusOr<char> m = LexInside(kind == '{' ? '}' : '%', tag_line, tag_col);
        if (!m.ok()) return m.status();
        end_modifier = *m;
      }
      strip_leading = end_modifier == '-';
      line_starting = false;
      if (end_modifier == '\0' && kind != '{' && pos_ < src_.size() && src_[pos_] == '\n') {
        Advance(1);  // trim_blocks
        line_starting = true;
      }
      if (strip_leading) {
        size_t i = pos_;
        while (i < src_.size() && IsSpace(src_[i])) ++i;
        if (i > pos_ && src_[i - 1] == '\n') line_starting = true;
        Advance(i - pos_);
        strip_leading = false;
      }
    }
    Emit(TokenType::kEof, "", line_, col_);
    return std::move(tokens_);
  }

 private:
  size_t FindTagStart(size_t from) const {
    while (true) {
      size_t p = src_.find('{', from);
      if (p == std::string::npos || p + 1 >= src_.size()) return std::string::npos;
      char c = src_[p + 1];
      if (c == '{' || c == '%' || c == '#') return p;
      from = p + 1;
    }
  }

  void Advance(size_t n) {
    for (size_t i = 0; i < n && pos_ < src_.size(); ++i, ++pos_) {
      if (src_[pos_] == '\n') {
        ++line_;
        col_ = 1;
      } else {
        ++col_;
      }
    }
  }

  void Emit(TokenType t, std::string v, int line, int col) {
    if (t == TokenType::kText && v.empty()) return;
    tokens_.push_back(Token{t, std::move(v), line, col});
  }

  absl::Status Error(int line, int col, const std::string& msg) const {
    return absl::InvalidArgumentError(
        absl::StrCat("chat template: syntax error at line ", line, ", column ", col, ": ", msg));
  }

  // Lexes the inside of {{ }} or {% %} up to and including the closing delimiter. Returns the
  // closing modifier ('-', '+' or '\0').
  absl::StatusOr<char> LexInside(char close, int tag_line, int tag_col) {
    int depth = 0;  // open brackets: closing delimiters inside them are operators
    while (true) {
      while (pos_ < src_.size() && IsSpace(src_[pos_])) Advance(1);
      if (pos_ >= src_.size()) {
        return Error(tag_line, tag_col, close == '}' ? "unterminated '{{'" : "unterminated '{%'");
      }
      int line = line_, col = col_;
      char c = src_[pos_];
      if (depth == 0) {
        for (char m : {'-', '+', '\0'}) {
          std::string end = m ? std::string(1, m) : "";
          end += close;
          end += '}';
          if (src_.compare(pos_, end.size(), end) == 0 && (m != '+' || close == '%')) {
            Advance(end.size());
            Emit(close == '}' ? TokenType::kVarEnd : TokenType::kBlockEnd, "", line, col);
            return m;
          }
        }
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t s = pos_;
        while (pos_ < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) {
          Advance(1);
        }
        Emit(TokenType::kName, src_.substr(s, pos_ - s), line, col);
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        LexNumber(line, col);
      } else if (c == '\'' || c == '"') {
        absl::Status st = LexString(line, col);
        if (!st.ok()) return st;
      } else {
        static const char* kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*",
                                     "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                     "]",  "{",  "}",  ",",  ".",  ":",  "|", ";"};
        std::string op;
        for (const char* o : kOps) {
          if (src_.compare(pos_, std::char_traits<char>::length(o), o) == 0) {
            op = o;
            break;
          }
        }
        if (op.empty())
          return Error(line, col, absl::StrCat("unexpected character '", std::string(1, c), "'"));
        if (op == "(" || op == "[" || op == "{") ++depth;
        if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
        Advance(op.size());
        Emit(TokenType::kOp, op, line, col);
      }
    }
  }

  void LexNumber(int line, int col) {
    size_t s = pos_;
    auto digits = [&] {
      while (pos_ < src_.size() &&
             (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) {
        Advance(1);
      }
    };
    digits();
    bool is_float = false;
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
      is_float = true;
      Advance(1);
      digits();
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t p = pos_ + 1;
      if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
      if (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) {
        is_float = true;
        Advance(p - pos_);
        digits();
      }
    }
    std::string text;
    for (size_t i = s; i < pos_; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    Emit(is_float ? TokenType::kFloat : TokenType::kInt, std::move(text), line, col);
  }

  absl::Status LexString(int line, int col) {
    char quote = src_[pos_];
    Advance(1);
    std::string out;
    while (true) {
      if (pos_ >= src_.size()) return Error(line, col, "unterminated string literal");
      char c = src_[pos_];
      if (c == quote) {
        Advance(1);
        break;
      }
      if (c != '\\') {
        out += c;
        Advance(1);
        continue;
      }
      if (pos_ + 1 >= src_.size()) return Error(line, col, "unterminated string literal");
      char e = src_[pos_ + 1];
      Advance(2);
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'v':
          out += '\v';
          break;
        case 'a':
          out += '\a';
          break;
        case '0':
          out += '\0';
          break;
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case '\n':
          break;
        case 'x':
        case 'u':
        case 'U': {
          size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t cp = 0;
          for (size_t i = 0; i < n; ++i) {
            if (pos_ >= src_.size() || !std::isxdigit(static_cast<unsigned char>(src_[pos_]))) {
              return Error(line, col, "bad escape in string literal");
            }
            char h = src_[pos_];
            cp = cp * 16 +
                 (std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (h | 0x20) - 'a' + 10);
            Advance(1);
          }
          if (cp > 0x10ffff) return Error(line, col, "bad escape in string literal");
          AppendUtf8(cp, &out);
          break;
        }
        default:
          out += '\\';
          out += e;
      }
    }
    Emit(TokenType::kString, std::move(out), line, col);
    return absl::OkStatus();
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1, col_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source) {
  // Jinja normalizes newlines and drops one trailing newline (keep_trailing_newline=False).
  std::string src;
  src.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      src += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      src += source[i];
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  return Lexer(std::move(src)).Run();
}

}  // namespace attnserve::server::text::jinja
