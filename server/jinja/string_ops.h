// Python's str methods on UTF-8 text. Case mapping and character classes cover ASCII (other characters
// are kept as they are); whitespace is Python's (str.isspace: ASCII, NBSP, the Unicode spaces, U+3000).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "server/jinja/value.h"

namespace inflight::server::jinja {

// str.strip / lstrip / rstrip; `chars` null: whitespace. `chars` is a set of code points.
std::string strip(const std::string& s, const std::string* chars, bool left, bool right);
std::string to_upper(const std::string& s);
std::string to_lower(const std::string& s);
std::string to_title(const std::string& s);   // str.title(): every word's first letter upper, the rest lower
std::string capitalize(const std::string& s);  // first character upper, the rest lower
std::string swap_case(const std::string& s);
// str.split / rsplit: `sep` null splits on whitespace runs and drops empty parts; maxsplit < 0: no limit.
std::vector<std::string> split(const std::string& s, const std::string* sep, int64_t maxsplit, bool from_right);
std::vector<std::string> split_lines(const std::string& s);
// str.replace; count < 0: all. An empty `from` inserts `to` between characters, as Python does.
std::string replace(const std::string& s, const std::string& from, const std::string& to, int64_t count);
int64_t count_substring(const std::string& s, const std::string& sub);
// isdigit, isalpha, isalnum, isspace, islower, isupper, isnumeric, isdecimal.
bool char_class_test(const std::string& s, const std::string& which);
// The widths, precisions and indices a template writes are at most this: nothing a template needs is
// larger, and a larger one would only ask for memory (a render error instead).
inline constexpr int64_t kMaxFormatCount = int64_t(1) << 20;
// The value of a run of decimal digits (a width, a precision, an index in a dotted path); a render error
// naming `what` past kMaxFormatCount.
int64_t decimal_count(std::string_view digits, const char* what);
// Whether a float truncates toward zero to an int64 (Python's ints are unbounded; outside int64, and for NaN and
// infinities, the cast is undefined behaviour). 2^63 is exact as a double.
inline bool fits_int64(double d) { return __builtin_fabs(d) < 9223372036854775808.0; }
// A float truncated toward zero, as Python's int(): a render error naming `what` where !fits_int64(d).
int64_t truncate_to_int(double d, const char* what);
// center, ljust, rjust (with the fill character), zfill.
std::string pad(const std::string& s, int64_t width, const std::string& how, const std::string& fill);
// str.format: {} {0} {name} {0[key]} {name.attr} with format specs (fill, align, sign, width, .precision,
// type d f s e %), {{ and }}.
std::string python_format(const std::string& format, const Args& args);
// Python's `%` on a str: printf style (%s %r %d %i %f %e %x %%, %(key)s, flags, width, precision).
std::string percent_format(const std::string& format, const Value& args);
// Jinja's indent filter: lines after the first (and the first when `first`) get `prefix`; blank lines
// only when `blank`.
std::string indent_lines(const std::string& s, const std::string& prefix, bool first, bool blank);
// HTML escaping of & < > " ' (the escape filter).
std::string html_escape(const std::string& s);

}  // namespace inflight::server::jinja
