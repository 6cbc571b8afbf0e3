// Text from a request, made safe for one log line: nothing in it can end the line, move the cursor,
// recolour a terminal, reorder the text (bidi controls) or break the quotes the line puts around it.
#pragma once
#include <string>
#include <string_view>

namespace inflight::server {

// Printable ASCII and valid UTF-8 pass unchanged. Escaped: `\` and `"` (as \\ and \"), ASCII control
// bytes and DEL (\xNN), bytes that are not valid UTF-8 (\xNN), and the code points that act as controls
// (C1 U+0080-U+009F, line/paragraph separators U+2028/U+2029, bidi controls U+200E/F, U+202A-U+202E,
// U+2066-U+2069) as \u{XXXX}.
std::string log_escape(std::string_view text);

}  // namespace inflight::server
