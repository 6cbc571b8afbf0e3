// equal_constant_time: the API key comparison. Equal only when every byte and the length match; a
// prefix, a longer string or one differing in the last byte never matches.
#include <doctest/doctest.h>

#include <string>

#include "server/constant_time.h"

using inflight::server::equal_constant_time;

TEST_CASE("equal_constant_time: equal strings match, any difference does not") {
  const std::string key = "sk-0123456789abcdef";
  CHECK(equal_constant_time(key, key));
  CHECK(equal_constant_time(std::string(key), key));
  CHECK_FALSE(equal_constant_time("sk-0123456789abcdeF", key));  // last byte
  CHECK_FALSE(equal_constant_time("Sk-0123456789abcdef", key));  // first byte
  CHECK_FALSE(equal_constant_time("sk-0123456789abcde", key));   // a prefix
  CHECK_FALSE(equal_constant_time(key + key, key));              // the key repeated: cyclic reads must not match
  CHECK_FALSE(equal_constant_time(key + "x", key));
  CHECK_FALSE(equal_constant_time("", key));
  CHECK(equal_constant_time("", ""));
  CHECK_FALSE(equal_constant_time("x", ""));
  CHECK_FALSE(equal_constant_time(std::string("sk\0", 3), "sk"));
}
