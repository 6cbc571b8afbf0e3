#include "server/jinja/lexer.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>

#include <utf8proc.h>

#include "server/jinja/value.h"

namespace inflight::server::jinja {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

[[noreturn]] void syntax_error(int line, const std::string& what) {
  throw Error(Error::Kind::Syntax, "template syntax error, line " + std::to_string(line) + ": " + what);
}

void append_utf8(std::string& out, uint32_t cp) {
  utf8proc_uint8_t buf[4];
  const utf8proc_ssize_t n = utf8proc_encode_char(utf8proc_int32_t(cp), buf);
  out.append(reinterpret_cast<const char*>(buf), size_t(n));
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(source) {
    if (!src_.empty() && src_.back() == '\n') src_.remove_suffix(1);
  }

  std::vector<Token> run() {
    bool strip_head = false;  // the previous tag ended with '-'
    bool trim_head = false;   // the previous tag was a block or comment (trim_blocks)
    while (pos_ <= src_.size()) {
      const size_t open = find_tag(pos_);
      std::string text(src_.substr(pos_, open - pos_));
      const size_t text_start = pos_;
      const bool at_end = open >= src_.size();
      const char kind = at_end ? 0 : src_[open + 1];  // '{', '%' or '#'
      const char marker = at_end || open + 2 >= src_.size() ? 0 : src_[open + 2];
      // lstrip_blocks: judged on the raw text, before trim_blocks takes the newline.
      if (!at_end && (kind == '%' || kind == '#') && marker != '+' && marker != '-') {
        const size_t nl = text.rfind('\n');
        const size_t tail = nl == std::string::npos ? 0 : nl + 1;
        const bool line_start = nl != std::string::npos || text_start == 0;
        if (line_start && std::all_of(text.begin() + tail, text.end(), [](char c) { return c == ' ' || c == '\t'; }))
          text.erase(tail);
      }
      if (strip_head) {
        text.erase(0, std::find_if_not(text.begin(), text.end(), is_space) - text.begin());
      } else if (trim_head && !text.empty() && text[0] == '\n') {
        text.erase(0, 1);
      }
      if (marker == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      }
      if (!text.empty()) push(TokenKind::Text, std::move(text), line_at(text_start));
      if (at_end) break;

      pos_ = open + 2 + ((marker == '-' || marker == '+') ? 1 : 0);
      if (kind == '#') {
        const size_t close = src_.find("#}", pos_);
        if (close == std::string_view::npos) syntax_error(line_at(open), "unclosed comment");
        strip_head = close > pos_ && src_[close - 1] == '-';
        trim_head = true;
        pos_ = close + 2;
        continue;
      }
      push(kind == '{' ? TokenKind::VarBegin : TokenKind::BlockBegin, {}, line_at(open));
      const size_t first_token = tokens_.size();
      strip_head = lex_tag(kind == '{' ? '}' : '%', open);
      trim_head = kind == '%';
      push(kind == '{' ? TokenKind::VarEnd : TokenKind::BlockEnd, {}, line_at(pos_ - 1));
      if (kind == '%' && tokens_.size() == first_token + 2 && tokens_[first_token].kind == TokenKind::Name &&
          tokens_[first_token].text == "raw")
        lex_raw(strip_head);
    }
    tokens_.push_back(Token{TokenKind::End, {}, 0, 0.0, line_at(src_.size())});
    return std::move(tokens_);
  }

 private:
  std::string_view src_;
  size_t pos_ = 0;
  std::vector<Token> tokens_;
  mutable size_t line_offset_ = 0;
  mutable int line_ = 1;

  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i)
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return src_.size();
  }

  // Offsets are asked for mostly in increasing order: count on from the last answer.
  int line_at(size_t offset) const {
    offset = std::min(offset, src_.size());
    if (offset < line_offset_) line_offset_ = 0, line_ = 1;
    line_ += int(std::count(src_.begin() + line_offset_, src_.begin() + offset, '\n'));
    line_offset_ = offset;
    return line_;
  }

  void push(TokenKind kind, std::string text, int line) {
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    t.line = line;
    tokens_.push_back(std::move(t));
  }

  // {% raw %}...{% endraw %}: the text in between, verbatim.
  void lex_raw(bool strip_head) {
    size_t search = pos_;
    while (true) {
      const size_t open = src_.find("{%", search);
      if (open == std::string_view::npos) syntax_error(line_at(pos_), "unclosed raw block (missing endraw)");
      size_t p = open + 2;
      const bool strip_tail = p < src_.size() && src_[p] == '-';
      if (strip_tail) ++p;
      while (p < src_.size() && is_space(src_[p])) ++p;
      if (src_.compare(p, 6, "endraw") != 0) {
        search = open + 2;
        continue;
      }
      std::string text(src_.substr(pos_, open - pos_));
      if (strip_head) text.erase(0, std::find_if_not(text.begin(), text.end(), is_space) - text.begin());
      else if (!text.empty() && text[0] == '\n') text.erase(0, 1);
      if (strip_tail)
        while (!text.empty() && is_space(text.back())) text.pop_back();
      // The raw text becomes a Text token inside the raw block's statement: {% raw %} TEXT {% endraw %}
      if (!text.empty()) push(TokenKind::Text, std::move(text), line_at(pos_));
      pos_ = open;
      return;
    }
  }

  // Expression tokens up to the tag's close ("}}" or "%}"); returns whether the close had a '-'. A tag
  // holds at most kMaxTagTokens: an expression tree is never deeper than its tokens, and rendering
  // recurses along it.
  bool lex_tag(char close_char, size_t open) {
    constexpr size_t kMaxTagTokens = 2048;
    const size_t first = tokens_.size();
    while (true) {
      if (tokens_.size() - first > kMaxTagTokens)
        syntax_error(line_at(open), "a tag longer than " + std::to_string(kMaxTagTokens) + " tokens");
      while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
      if (pos_ >= src_.size()) syntax_error(line_at(open), std::string("unclosed tag (missing '") + close_char + "}')");
      const char c = src_[pos_];
      const char next = pos_ + 1 < src_.size() ? src_[pos_ + 1] : 0;
      const char next2 = pos_ + 2 < src_.size() ? src_[pos_ + 2] : 0;
      if (c == close_char && next == '}') {
        pos_ += 2;
        return false;
      }
      if ((c == '-' || c == '+') && next == close_char && next2 == '}') {
        pos_ += 3;
        return c == '-';
      }
      const int line = line_at(pos_);
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        const size_t start = pos_;
        while (pos_ < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
        push(TokenKind::Name, std::string(src_.substr(start, pos_ - start)), line);
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number(line);
      } else if (c == '\'' || c == '"') {
        lex_string(c, line);
      } else {
        static constexpr std::array<std::string_view, 6> kTwo = {"//", "**", "==", "!=", "<=", ">="};
        const std::string_view two = src_.substr(pos_, 2);
        if (std::find(kTwo.begin(), kTwo.end(), two) != kTwo.end()) {
          push(TokenKind::Operator, std::string(two), line);
          pos_ += 2;
        } else if (std::string_view("+-*/%~<>=()[]{},.:|").find(c) != std::string_view::npos) {
          push(TokenKind::Operator, std::string(1, c), line);
          ++pos_;
        } else {
          syntax_error(line, std::string("unexpected character '") + c + "'");
        }
      }
    }
  }

  void lex_number(int line) {
    const size_t start = pos_;
    auto digits = [&] {
      while (pos_ < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
    };
    digits();
    bool is_float = false;
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
      is_float = true;
      ++pos_;
      digits();
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t p = pos_ + 1;
      if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
      if (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) {
        is_float = true;
        pos_ = p;
        digits();
      }
    }
    std::string text(src_.substr(start, pos_ - start));
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    Token t;
    t.line = line;
    t.text = text;
    if (is_float) {
      t.kind = TokenKind::Float;
      // As Python's float(): past double's range is inf, below it 0 (std::stod would throw out_of_range).
      t.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      t.kind = TokenKind::Int;
      try {
        t.int_value = std::stoll(text);
      } catch (const std::out_of_range&) {
        syntax_error(line, "integer literal out of range: " + text);
      }
    }
    tokens_.push_back(std::move(t));
  }

  void lex_string(char quote, int line) {
    ++pos_;
    std::string out;
    while (true) {
      if (pos_ >= src_.size()) syntax_error(line, "unclosed string literal");
      const char c = src_[pos_++];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= src_.size()) syntax_error(line, "unclosed string literal");
      const char e = src_[pos_++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '0': out += '\0'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': break;  // a line continuation
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          const std::string_view hex = src_.substr(pos_, n);
          if (hex.size() != n || !std::all_of(hex.begin(), hex.end(), [](char h) { return std::isxdigit(static_cast<unsigned char>(h)); }))
            syntax_error(line, std::string("invalid \\") + e + " escape in a string literal");
          append_utf8(out, uint32_t(std::stoul(std::string(hex), nullptr, 16)));
          pos_ += n;
          break;
        }
        default:
          out += '\\';
          out += e;
      }
    }
    push(TokenKind::String, std::move(out), line);
  }
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

}  // namespace inflight::server::jinja
