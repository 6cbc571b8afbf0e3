// log_escape: what a request puts in a log line cannot end the line, drive the terminal, reorder the
// text or break out of the quotes; ordinary text (UTF-8 included) is unchanged.
#include <doctest/doctest.h>

#include "server/log_escape.h"

using inflight::server::log_escape;

TEST_CASE("log_escape: printable ASCII and valid UTF-8 pass unchanged") {
  CHECK(log_escape("POST /v1/completions?x=1") == "POST /v1/completions?x=1");
  CHECK(log_escape("caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80") == "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80");
  CHECK(log_escape("") == "");
}

TEST_CASE("log_escape: line breaks, terminal escapes and other ASCII controls become \\xNN") {
  CHECK(log_escape("GET /a\r\n2026-01-01 [info] forged") == "GET /a\\x0D\\x0A2026-01-01 [info] forged");
  CHECK(log_escape("\x1B[31mred\x1B[0m") == "\\x1B[31mred\\x1B[0m");
  CHECK(log_escape(std::string("a\0b", 3)) == "a\\x00b");
  CHECK(log_escape("\t\x7F\x08") == "\\x09\\x7F\\x08");
}

TEST_CASE("log_escape: quotes and backslashes are escaped so the quoted field cannot be closed early") {
  CHECK(log_escape("GET /\" 200 forged") == "GET /\\\" 200 forged");
  CHECK(log_escape("a\\x41") == "a\\\\x41");
}

TEST_CASE("log_escape: invalid UTF-8 becomes \\xNN byte by byte") {
  CHECK(log_escape("\xFF\xFE") == "\\xFF\\xFE");
  CHECK(log_escape("\x9B" "2J") == "\\x9B2J");                 // a lone 8-bit CSI
  CHECK(log_escape("\xC3") == "\\xC3");                       // truncated
  CHECK(log_escape("\xC0\xAF") == "\\xC0\\xAF");              // overlong '/'
  CHECK(log_escape("\xED\xA0\x80") == "\\xED\\xA0\\x80");     // a surrogate
  CHECK(log_escape("\xF4\x90\x80\x80") == "\\xF4\\x90\\x80\\x80");  // above U+10FFFF
}

TEST_CASE("log_escape: code points that act as controls become \\u{XXXX}") {
  CHECK(log_escape("\xC2\x9B" "2J") == "\\u{009B}2J");              // C1 CSI
  CHECK(log_escape("a\xE2\x80\xA8" "b") == "a\\u{2028}b");          // line separator
  CHECK(log_escape("\xE2\x80\xAE" "txt.exe") == "\\u{202E}txt.exe");  // right-to-left override
  CHECK(log_escape("\xE2\x81\xA6x\xE2\x81\xA9") == "\\u{2066}x\\u{2069}");
}
