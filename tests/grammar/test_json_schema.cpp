// engine/grammar/json_schema.cpp: JSON Schema to GBNF, every supported keyword checked by running instances
// through parse_gbnf + Matcher (the real matcher decides), the errors with their JSON pointers, the limits.
// The official JSON Schema Test Suite runs separately (tests/grammar/json_schema_suite, ctest json_schema_suite).
#include <doctest/doctest.h>

#include <random>

#include <nlohmann/json.hpp>

#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/matcher.h"
#include "grammar_test_support.h"

using namespace inflight::engine::grammar;

namespace {

using inflight::test::single_bytes;

// A schema's grammar, compiled; accepts() runs one instance text through a fresh matcher.
struct Schema {
  explicit Schema(const std::string& schema_json, JsonSchemaOptions options = {})
      : gbnf(json_schema_to_gbnf(std::string_view(schema_json), options)), grammar(parse_gbnf(gbnf)) {}
  bool accepts(std::string_view text) const {
    Matcher m(grammar, single_bytes());
    return m.accept_bytes(text) && m.can_end();
  }
  std::string gbnf;
  std::shared_ptr<const Grammar> grammar;
};

std::string error_of(const std::string& schema_json, JsonSchemaOptions options = {}) {
  try {
    json_schema_to_gbnf(std::string_view(schema_json), options);
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_SUITE("json schema") {
  TEST_CASE("type: each type, a list of types, and no type (any JSON value)") {
    const Schema str(R"({"type":"string"})");
    CHECK(str.accepts(R"("")"));
    CHECK(str.accepts(R"("a\"b\\ \u00e9 é \n")"));
    CHECK(!str.accepts(R"("a
b")"));
    CHECK(!str.accepts("1"));
    const Schema num(R"({"type":"number"})");
    for (const char* ok : {"0", "-0", "1.5", "-12e-3", "1E+9", "10"}) CHECK(num.accepts(ok));
    for (const char* bad : {"01", "1.", ".5", "+1", "1e", "\"1\""}) CHECK(!num.accepts(bad));
    const Schema integer(R"({"type":"integer"})");
    CHECK(integer.accepts("-12"));
    CHECK(!integer.accepts("1.5"));
    CHECK(!integer.accepts("1e2"));
    const Schema b(R"({"type":"boolean"})");
    CHECK(b.accepts("true"));
    CHECK(b.accepts("false"));
    CHECK(!b.accepts("null"));
    const Schema n(R"({"type":"null"})");
    CHECK(n.accepts("null"));
    const Schema list(R"({"type":["string","null"]})");
    CHECK(list.accepts("null"));
    CHECK(list.accepts(R"("x")"));
    CHECK(!list.accepts("1"));
    const Schema any(R"({})");
    for (const char* ok : {"1", "\"s\"", "null", "true", "[]", "{}", R"({"a":[1,{"b":null}]})"}) CHECK(any.accepts(ok));
    CHECK(!any.accepts("{ }"));  // compact form only
    const Schema yes("true");
    CHECK(yes.accepts(R"([1,"2"])"));
  }

  TEST_CASE("whitespace is compact unless any_whitespace, and bounded then") {
    const std::string schema = R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}}})";
    const Schema compact(schema);
    CHECK(compact.accepts(R"({"a":[1,2]})"));
    CHECK(!compact.accepts(R"({"a": [1,2]})"));
    JsonSchemaOptions options;
    options.any_whitespace = true;
    const Schema spaced(schema, options);
    CHECK(spaced.accepts(R"({"a":[1,2]})"));
    CHECK(spaced.accepts("{\n  \"a\": [ 1, 2 ]\n}"));
    CHECK(spaced.accepts("{ \"a\" :\t[1 ,2] }"));
    CHECK(!spaced.accepts("{  \"a\":[1,2]}"));                          // two spaces
    CHECK(!spaced.accepts("{\n" + std::string(40, ' ') + "\"a\":[]}"));  // indentation past 32
    const Schema any_spaced("{}", options);
    CHECK(any_spaced.accepts("{ \"x\": [ 1, { \"y\": null } ] }"));
  }

  TEST_CASE("properties: schema order, every combination of optional ones, no stray commas") {
    // a required, b and c optional; then all optional; then all required.
    const struct {
      const char* required;
      std::vector<std::string> must;
    } variants[] = {{R"(["a"])", {"a"}}, {"[]", {}}, {R"(["a","b","c"])", {"a", "b", "c"}}, {R"(["c"])", {"c"}}};
    for (const auto& v : variants) {
      for (const char* additional : {"false", "true"}) {
        const Schema s(std::string(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},)") +
                       R"("c":{"type":"boolean"}},"required":)" + v.required + R"(,"additionalProperties":)" +
                       additional + "}");
        for (int mask = 0; mask < 8; ++mask) {
          std::string text = "{";
          std::vector<std::string> present;
          const char* members[] = {R"("a":1)", R"("b":"x")", R"("c":true)"};
          for (int i = 0; i < 3; ++i) {
            if (!(mask & (1 << i))) continue;
            if (text.size() > 1) text += ",";
            text += members[i];
            present.push_back(std::string(1, char('a' + i)));
          }
          text += "}";
          bool want = true;
          for (const std::string& m : v.must) want = want && std::count(present.begin(), present.end(), m) == 1;
          CAPTURE(text);
          CAPTURE(v.required);
          CHECK(s.accepts(text) == want);
        }
        CHECK(!s.accepts(R"({,"a":1})"));
        CHECK(!s.accepts(R"({"a":1,})"));
        CHECK(!s.accepts(R"({"b":"x","a":1})"));  // schema order
        const bool only_a = std::string(v.required) == R"(["a"])" || std::string(v.required) == "[]";
        CHECK(s.accepts(R"({"a":1,"zz":0})") == (std::string(additional) == "true" && only_a));
      }
    }
  }

  TEST_CASE("minProperties and maxProperties: every combination of optional and additional members") {
    for (const char* additional : {"false", "true"}) {
      for (int lo = 0; lo <= 4; ++lo) {
        for (int hi = lo; hi <= 5; ++hi) {
          const std::string schema =
              std::string(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},)") +
              R"("c":{"type":"integer"}},"required":["b"],"additionalProperties":)" + additional +
              ",\"minProperties\":" + std::to_string(lo) + ",\"maxProperties\":" + std::to_string(hi) + "}";
          // "b" is required, and without additional properties there are at most 3 members.
          if (hi == 0 || (std::string(additional) == "false" && lo > 3)) {
            CHECK(error_of(schema) == "no object has the required properties within minProperties/maxProperties at /");
            continue;
          }
          const Schema s(schema);
          for (int mask = 0; mask < 8; ++mask) {
            for (int extras = 0; extras <= 2; ++extras) {
              std::string text = "{";
              int n = 0;
              for (int i = 0; i < 3; ++i) {
                if (!(mask & (1 << i))) continue;
                text += std::string(n++ ? "," : "") + "\"" + char('a' + i) + "\":1";
              }
              for (int e = 0; e < extras; ++e) text += std::string(n++ ? "," : "") + "\"x" + std::to_string(e) + "\":1";
              text += "}";
              const bool want = (mask & 2) && n >= lo && n <= hi && (extras == 0 || std::string(additional) == "true");
              CAPTURE(text);
              CAPTURE(s.gbnf);
              CHECK(s.accepts(text) == want);
            }
          }
        }
      }
    }
    CHECK(error_of(R"({"type":"object","required":["a","b"],"maxProperties":1})") ==
          "no object has the required properties within minProperties/maxProperties at /");
    CHECK(error_of(R"({"type":"object","minProperties":3,"maxProperties":1})") ==
          "minProperties above maxProperties: no object matches at /");
    const Schema only_additional(R"({"type":"object","minProperties":2,"maxProperties":3})");
    CHECK(!only_additional.accepts(R"({"a":1})"));
    CHECK(only_additional.accepts(R"({"a":1,"b":2})"));
    CHECK(!only_additional.accepts(R"({"a":1,"b":2,"c":3,"d":4})"));
  }

  TEST_CASE("additionalProperties: keys spelled like a declared property must match its schema") {
    const Schema s(R"({"properties":{"ab":{"type":"integer"},"b\"q":{"type":"integer"}},"additionalProperties":{"type":"string"}})");
    CHECK(s.accepts(R"({"ab":1,"a":"x","abc":"y","b":"z","":"e"})"));
    CHECK(!s.accepts(R"({"ab":"x"})"));           // "ab" is declared: its value must be an integer
    CHECK(!s.accepts(R"({"ab":1,"ab":"x"})"));    // and not again as an additional key
    CHECK(!s.accepts(R"({"b\"q":"x"})"));
    CHECK(s.accepts(R"({"b\"q":2,"b\"r":"x"})"));
    CHECK(!s.accepts(R"({"zz":1})"));             // additional values are strings
    CHECK(s.accepts(R"({"a\u0062":"x"})"));       // NOTE: escapes are not decoded (documented)
    const Schema none(R"({"properties":{"a":{}},"additionalProperties":false})");
    CHECK(!none.accepts(R"({"b":1})"));
    CHECK(none.accepts(R"({})"));
    const Schema only_additional(R"({"type":"object","additionalProperties":{"type":"integer"}})");
    CHECK(only_additional.accepts(R"({"x":1,"y":2})"));
    CHECK(!only_additional.accepts(R"({"x":"1"})"));
    const Schema forbidden(R"({"properties":{"a":false}})");
    CHECK(!forbidden.accepts(R"({"a":1})"));
    CHECK(forbidden.accepts(R"({"b":1})"));
  }

  TEST_CASE("required names beyond properties take additionalProperties' schema") {
    const Schema s(R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["z"],"additionalProperties":{"type":"boolean"}})");
    CHECK(s.accepts(R"({"z":true})"));
    CHECK(s.accepts(R"({"a":1,"z":false,"q":true})"));
    CHECK(!s.accepts(R"({"a":1})"));
    CHECK(!s.accepts(R"({"z":1})"));
    CHECK(error_of(R"({"type":"object","required":["z"],"additionalProperties":false})") ==
          "required property \"z\" is not allowed by additionalProperties false at /");
  }

  TEST_CASE("a subschema nothing matches drops out where it may: a type, an anyOf branch, an optional member") {
    const Schema other_types(R"({"required":["z"],"additionalProperties":false})");  // no object, all else
    CHECK(other_types.accepts("1"));
    CHECK(other_types.accepts(R"("s")"));
    CHECK(!other_types.accepts("{}"));
    CHECK(!other_types.accepts(R"({"z":1})"));
    const Schema branch(R"({"anyOf":[{"type":"string","minLength":3,"maxLength":1},{"type":"integer"}]})");
    CHECK(branch.accepts("1"));
    CHECK(!branch.accepts(R"("abc")"));
    const Schema member(R"({"properties":{"a":{"type":"integer","minimum":5,"maximum":1},"b":{}}})");
    CHECK(member.accepts(R"({"b":1})"));
    CHECK(!member.accepts(R"({"a":1})"));
    const Schema position(R"({"prefixItems":[{"type":"integer"},{"enum":[1],"type":"string"}]})");
    CHECK(position.accepts("[1]"));
    CHECK(!position.accepts("[1,1]"));
    const Schema overlap_gone(R"({"oneOf":[{"type":"integer"},{"type":"integer","minimum":3,"maximum":2}]})");
    CHECK(overlap_gone.accepts("7"));
    CHECK(error_of(R"({"anyOf":[{"type":"integer","minimum":3,"maximum":2},false]})") == "anyOf: no branch can match at /");
  }

  TEST_CASE("items, prefixItems, minItems, maxItems: every length") {
    struct Case {
      const char* schema;
      std::vector<std::string> accepted, rejected;
    };
    const Case cases[] = {
        {R"({"items":{"type":"integer"},"minItems":2,"maxItems":3})", {"[1,2]", "[1,2,3]"}, {"[]", "[1]", "[1,2,3,4]", "[1,\"a\"]"}},
        {R"({"type":"array","items":{"type":"integer"}})", {"[]", "[1]", "[1,2,3,4,5]"}, {"[,]", "[1,]", "[\"a\"]"}},
        {R"({"type":"array","minItems":1})", {"[1]", "[null,{}]"}, {"[]"}},
        {R"({"type":"array","maxItems":0})", {"[]"}, {"[1]"}},
        {R"({"prefixItems":[{"type":"integer"},{"type":"string"}]})", {"[]", "[1]", "[1,\"a\"]", "[1,\"a\",null,true]"}, {"[\"a\"]", "[1,2]"}},
        {R"({"prefixItems":[{"type":"integer"},{"type":"string"}],"items":false})", {"[]", "[1]", "[1,\"a\"]"}, {"[1,\"a\",null]"}},
        {R"({"prefixItems":[{"type":"integer"}],"items":{"type":"boolean"},"minItems":3})", {"[1,true,false]", "[1,true,false,true]"}, {"[1,true]", "[1,2,3]"}},
        {R"({"prefixItems":[{"type":"integer"},{"type":"integer"},{"type":"integer"}],"maxItems":2,"minItems":1})", {"[1]", "[1,2]"}, {"[]", "[1,2,3]"}},
        {R"({"items":[{"type":"integer"}],"additionalItems":{"type":"string"}})", {"[1,\"a\",\"b\"]", "[]"}, {"[1,2]"}},  // draft 4
        {R"({"items":[{"type":"integer"}]})", {"[1,2,null]"}, {"[\"a\"]"}},
        {R"({"type":"array","uniqueItems":false})", {"[1,1]"}, {}},
    };
    for (const Case& c : cases) {
      CAPTURE(c.schema);
      const Schema s(c.schema);
      for (const std::string& t : c.accepted) {
        CAPTURE(t);
        CHECK(s.accepts(t));
      }
      for (const std::string& t : c.rejected) {
        CAPTURE(t);
        CHECK(!s.accepts(t));
      }
    }
  }

  TEST_CASE("enum and const: exact compact literals, filtered by type and bounds") {
    const Schema e(R"({"enum":["a\"b",1,1.5,null,true,{"k":[1,2]},[],"é"]})");
    for (const char* ok : {R"("a\"b")", "1", "1.5", "null", "true", R"({"k":[1,2]})", "[]", "\"é\""}) CHECK(e.accepts(ok));
    for (const char* bad : {"1.0", "false", R"({"k": [1,2]})", "\"a\"", "[1]"}) CHECK(!e.accepts(bad));
    const Schema c(R"({"const":{"a":null}})");
    CHECK(c.accepts(R"({"a":null})"));
    CHECK(!c.accepts(R"({})"));
    const Schema filtered(R"({"type":"string","enum":["x",1,"yy"],"maxLength":1})");
    CHECK(filtered.accepts(R"("x")"));
    CHECK(!filtered.accepts("1"));
    CHECK(!filtered.accepts(R"("yy")"));
    const Schema integral(R"({"type":"integer","enum":[1.0,2.5]})");
    CHECK(integral.accepts("1"));
    CHECK(!integral.accepts("2.5"));
    // Every other keyword filters the values, through the grammar of the rest of the schema.
    const Schema rest(R"({"enum":["ab","b",{"a":1},{"a":"x"},[1,2],[1,"x"]],"pattern":"^a","properties":{"a":{"type":"integer"}},"items":{"type":"integer"}})");
    CHECK(rest.accepts(R"("ab")"));
    CHECK(!rest.accepts(R"("b")"));
    CHECK(rest.accepts(R"({"a":1})"));
    CHECK(!rest.accepts(R"({"a":"x"})"));
    CHECK(rest.accepts("[1,2]"));
    CHECK(!rest.accepts(R"([1,"x"])"));
    CHECK(error_of(R"({"enum":["a"],"format":"date"})") ==
          "no enum/const value passes the schema's other keywords: it matches nothing at /");
    CHECK(error_of(R"({"enum":[1],"dependentRequired":{}})") ==
          "unsupported JSON Schema keyword \"dependentRequired\" at /");
    CHECK(error_of(R"({"type":"string","enum":[1]})") ==
          "no enum/const value passes the schema's other keywords: it matches nothing at /");
  }

  TEST_CASE("anyOf, oneOf (disjoint branches only) and allOf") {
    const Schema any(R"({"anyOf":[{"type":"integer","minimum":5},{"type":"string","maxLength":1}]})");
    CHECK(any.accepts("5"));
    CHECK(!any.accepts("4"));
    CHECK(any.accepts(R"("a")"));
    CHECK(!any.accepts(R"("ab")"));
    const Schema siblings(R"({"type":"object","required":["a"],"anyOf":[{"properties":{"a":{"type":"integer"}}},{"properties":{"a":{"type":"string"}}}]})");
    CHECK(siblings.accepts(R"({"a":1})"));
    CHECK(siblings.accepts(R"({"a":"x"})"));
    CHECK(!siblings.accepts(R"({})"));
    const Schema one(R"({"oneOf":[{"type":"string"},{"type":"number"}]})");
    CHECK(one.accepts("1"));
    const Schema tagged(R"({"oneOf":[{"type":"object","properties":{"kind":{"const":"cat"},"lives":{"type":"integer"}},"required":["kind"]},{"type":"object","properties":{"kind":{"const":"dog"},"good":{"type":"boolean"}},"required":["kind"]}]})");
    CHECK(tagged.accepts(R"({"kind":"cat","lives":9})"));
    CHECK(tagged.accepts(R"({"kind":"dog","good":true})"));
    CHECK(!tagged.accepts(R"({"kind":"cow"})"));
    CHECK(error_of(R"({"oneOf":[{"type":"integer"},{"type":"number"}]})") ==
          "oneOf whose branches may overlap is not supported (exclusivity cannot be enforced; use anyOf) at /");
    const Schema all(R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},{"properties":{"b":{"type":"string"}},"required":["b"]},{"properties":{"a":{"minimum":3}}}]})");
    CHECK(all.accepts(R"({"a":3,"b":"x"})"));
    CHECK(!all.accepts(R"({"a":2,"b":"x"})"));
    CHECK(!all.accepts(R"({"a":3})"));
    // additionalProperties false in one branch forbids the other branch's properties (the spec's semantics).
    const Schema closed(R"({"allOf":[{"properties":{"a":{}},"additionalProperties":false},{"properties":{"b":{}}}]})");
    CHECK(closed.accepts(R"({"a":1})"));
    CHECK(!closed.accepts(R"({"a":1,"b":2})"));
    const Schema types(R"({"allOf":[{"type":["integer","string"]},{"type":"number"}]})");
    CHECK(types.accepts("1"));
    CHECK(!types.accepts("1.5"));
    CHECK(!types.accepts(R"("a")"));
    // items of one branch apply to every position of the other's prefixItems.
    const Schema arrays(R"({"allOf":[{"prefixItems":[{"type":"integer"},{}]},{"items":{"minimum":5}},{"prefixItems":[{},{},{"type":"string"}]}]})");
    CHECK(arrays.accepts("[5,6]"));
    CHECK(!arrays.accepts("[4]"));
    CHECK(!arrays.accepts("[5,4]"));
    CHECK(arrays.accepts(R"([5,6,"s",7])"));
    CHECK(!arrays.accepts(R"([5,6,7])"));
    CHECK(error_of(R"({"allOf":[{"pattern":"a"},{"pattern":"b"}]})") ==
          "allOf: cannot merge two different \"pattern\" at /allOf/1");
  }

  TEST_CASE("$ref: $defs, definitions, the root, recursion, escaped pointers") {
    const Schema tree(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"],"additionalProperties":false}},"$ref":"#/$defs/node"})");
    CHECK(tree.accepts(R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[{"v":4,"kids":[]}]}]})"));
    CHECK(!tree.accepts(R"({"v":1,"kids":[{"w":2}]})"));
    const Schema root(R"({"type":"object","properties":{"next":{"$ref":"#"},"x":{"type":"integer"}},"additionalProperties":false})");
    CHECK(root.accepts(R"({"next":{"next":{"x":1}}})"));
    CHECK(!root.accepts(R"({"next":{"y":1}})"));
    const Schema defs(R"({"definitions":{"a/b":{"type":"integer"},"c~d":{"type":"string"},"e%f":{"type":"null"}},"items":[{"$ref":"#/definitions/a~1b"},{"$ref":"#/definitions/c~0d"},{"$ref":"#/definitions/e%25f"}]})");
    CHECK(defs.accepts(R"([1,"x",null])"));
    CHECK(!defs.accepts(R"(["x"])"));
    const Schema sibling(R"({"$defs":{"i":{"type":"integer"}},"$ref":"#/$defs/i","minimum":3})");
    CHECK(sibling.accepts("3"));
    CHECK(!sibling.accepts("2"));
    CHECK(error_of(R"({"$ref":"http://example.com/s.json"})") ==
          "unsupported $ref \"http://example.com/s.json\" (only \"#\" and \"#/pointer\") at /");
    CHECK(error_of(R"({"$ref":"#/$defs/missing"})") == "$ref \"#/$defs/missing\" names nothing in the schema at /");
    CHECK(error_of(R"({"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})").find("circular $ref") == 0);
  }

  TEST_CASE("strings: minLength/maxLength in code points, pattern as a search") {
    const Schema len(R"({"type":"string","minLength":2,"maxLength":3})");
    CHECK(!len.accepts(R"("a")"));
    CHECK(len.accepts(R"("ab")"));
    CHECK(len.accepts(R"("éé")"));
    CHECK(len.accepts(R"("a\nb")"));
    CHECK(!len.accepts(R"("abcd")"));
    const Schema search(R"({"type":"string","pattern":"b+c"})");
    CHECK(search.accepts(R"("abbcd")"));
    CHECK(!search.accepts(R"("acd")"));
    const Schema anchored(R"({"type":"string","pattern":"^[a-z]+-\\d{2}$"})");
    CHECK(anchored.accepts(R"("ab-12")"));
    CHECK(!anchored.accepts(R"("ab-123")"));
    CHECK(!anchored.accepts(R"("Xab-12")"));
    const Schema quote(R"({"pattern":"^\"$"})");  // no type: the pattern applies to strings only
    CHECK(quote.accepts(R"("\"")"));
    CHECK(quote.accepts("12"));
    CHECK(error_of(R"({"pattern":"(a)\\1"})") ==
          "regex: backreference \\1 is not supported at offset 3 in \"pattern\" at /");
  }

  TEST_CASE("formats: valid and invalid examples") {
    const struct {
      const char* format;
      std::vector<const char*> valid, invalid;
    } cases[] = {
        {"date", {"2024-02-29", "2000-02-29", "1999-12-31", "2023-04-30", "2023-02-28"},
         {"2024-13-01", "2024-00-10", "2024-1-01", "24-01-01", "2024-01-32", "2023-02-29", "1900-02-29", "2023-04-31", "2023-02-30"}},
        {"time", {"23:59:60Z", "23:59:60.5-00:00", "00:00:00+05:30", "12:34:56.789z"},
         {"24:00:00Z", "12:60:00Z", "12:00:00", "1:00:00Z", "12:00:60Z", "23:59:60+01:00"}},
        {"date-time", {"2024-01-01T12:00:00Z", "2024-01-01t12:00:00.5-08:00"}, {"2024-01-01 12:00:00Z", "2024-01-01T12:00Z"}},
        {"uuid", {"123e4567-e89b-12d3-a456-426614174000"}, {"123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400g"}},
        {"email", {"joe@example.com", "a.b+c@d-e.f.org"}, {"joe", "@example.com", "joe@example", "a..b@c.d", "joe@-x.com"}},
        {"ipv4", {"192.168.0.1", "0.0.0.0", "255.255.255.255"}, {"256.1.1.1", "01.2.3.4", "1.2.3", "1.2.3.4.5"}},
        {"ipv6", {"::", "::1", "1::", "2001:db8::ff00:42:8329", "1:2:3:4:5:6:7:8", "::ffff:192.0.2.1", "fe80::1:2"},
         {"1:2:3:4:5:6:7:8:9", "1::2::3", "12345::", ":1", "1:2:3:4:5:6:7"}},
        {"uri", {"http://example.com/a?b=c#d", "urn:isbn:0451450523", "mailto:joe@example.com", "file:///etc/hosts",
                 "http://[::1]:8080/", "ftp://user:pw@host:21/x%20y", "a-b+c.d:/"},
         {"//example.com", "1http://x", "http://exa mple.com", "http://x/%zz", "http://[::1", "", "http://é.com", "x:", "x:?q"}},
    };
    for (const auto& c : cases) {
      const Schema s(std::string(R"({"type":"string","format":")") + c.format + "\"}");
      for (const char* v : c.valid) {
        CAPTURE(v);
        CHECK(s.accepts(std::string("\"") + v + "\""));
      }
      for (const char* v : c.invalid) {
        CAPTURE(v);
        CHECK(!s.accepts(std::string("\"") + v + "\""));
      }
    }
    CHECK(error_of(R"({"format":"hostname"})") == "unsupported JSON Schema format \"hostname\" at /format");
  }

  TEST_CASE("integer bounds: exact over thousands of values, inclusive and exclusive, negative") {
    const char* schemas[] = {R"({"type":"integer","minimum":-37,"maximum":1234})",
                             R"({"type":"integer","exclusiveMinimum":-100,"exclusiveMaximum":-3})",
                             R"({"type":"integer","minimum":5})", R"({"type":"integer","maximum":-5})",
                             R"({"type":"integer","minimum":0.5,"maximum":99.5})",
                             R"({"type":"integer","minimum":3,"exclusiveMinimum":true,"maximum":300,"exclusiveMaximum":true})"};
    const std::pair<long, long> ranges[] = {{-37, 1234}, {-99, -4}, {5, LONG_MAX}, {LONG_MIN, -5}, {1, 99}, {4, 299}};
    for (size_t i = 0; i < std::size(schemas); ++i) {
      const Schema s(schemas[i]);
      for (long v = -3000; v <= 3000; ++v) {
        CAPTURE(schemas[i]);
        CAPTURE(v);
        CHECK(s.accepts(std::to_string(v)) == (v >= ranges[i].first && v <= ranges[i].second));
      }
    }
  }

  TEST_CASE("number bounds: integer part exact, fractions compared as decimals") {
    const Schema s(R"({"type":"number","minimum":-1.5,"exclusiveMaximum":2.25})");
    for (const char* ok : {"-1.5", "-1.49", "0", "2", "2.2499", "-0.0", "1"}) CHECK(s.accepts(ok));
    for (const char* bad : {"-1.51", "2.25", "2.250", "3", "-2", "1e0"}) CHECK(!s.accepts(bad));
    const Schema unit(R"({"type":"number","exclusiveMinimum":0.1,"maximum":0.9})");
    for (const char* ok : {"0.11", "0.5", "0.9", "0.900"}) CHECK(unit.accepts(ok));
    for (const char* bad : {"0.1", "0.10", "0.91", "1", "0"}) CHECK(!unit.accepts(bad));
    CHECK(error_of(R"({"type":"integer","maximum":1e30})") == "a numeric bound beyond 1e18 is not supported at /");
    CHECK(error_of(R"({"type":"number","multipleOf":1.5})") ==
          "multipleOf other than an integer from 1 to 1000 is not supported at /");
    CHECK(error_of(R"({"type":"integer","multipleOf":3,"minimum":0})") ==
          "multipleOf beside minimum/maximum is not supported at /");
    CHECK(error_of(R"({"type":"integer","multipleOf":0})") == "\"multipleOf\" must be a positive number at /multipleOf");
  }

  TEST_CASE("multipleOf (an integer k): a remainder automaton, exact over thousands of values") {
    for (int k : {1, 2, 3, 7, 10, 12, 25, 97, 1000}) {
      const Schema integer(R"({"type":"integer","multipleOf":)" + std::to_string(k) + "}");
      const Schema number(R"({"type":"number","multipleOf":)" + std::to_string(k) + "}");
      for (long v = -2100; v <= 2100; v += (k >= 97 ? 1 : 3)) {
        CAPTURE(k);
        CAPTURE(v);
        CHECK(integer.accepts(std::to_string(v)) == (v % k == 0));
      }
      CHECK(number.accepts(std::to_string(5 * k) + ".00"));
      CHECK(!integer.accepts(std::to_string(5 * k) + ".0"));
      CHECK(number.accepts("0"));
      CHECK(!number.accepts("00"));
      CHECK(number.accepts(std::to_string(3 * k) + "000") );
      if (k > 1) CHECK(!number.accepts(std::to_string(3 * k + 1)));
      if (k > 1) CHECK(!number.accepts(std::to_string(k) + ".5"));
    }
    const Schema e(R"({"enum":[3,4,6,"x"],"multipleOf":3})");  // enum values filtered; "x" is no number
    CHECK(e.accepts("3"));
    CHECK(!e.accepts("4"));
    CHECK(e.accepts(R"("x")"));
  }

  TEST_CASE("not: of types only (or of true/false/{})") {
    const Schema no_integer(R"({"not":{"type":"integer"}})");
    for (const char* ok : {"1.5", "-0.25", "\"s\"", "null", "[1]", "{}"}) CHECK(no_integer.accepts(ok));
    for (const char* bad : {"1", "-3", "1.0", "2.50e1"}) CHECK(!no_integer.accepts(bad));
    const Schema two(R"({"type":["string","integer","null"],"not":{"type":["integer","boolean"]}})");
    CHECK(two.accepts(R"("x")"));
    CHECK(two.accepts("null"));
    CHECK(!two.accepts("1"));
    const Schema forbidden(R"({"properties":{"foo":{"not":{}},"bar":{"not":false}}})");
    CHECK(forbidden.accepts(R"({"bar":1,"baz":2})"));
    CHECK(!forbidden.accepts(R"({"foo":1})"));
    const Schema filtered(R"({"enum":[1,2.5,"a"],"not":{"type":"string"}})");
    CHECK(filtered.accepts("2.5"));
    CHECK(!filtered.accepts(R"("a")"));
    CHECK(error_of(R"({"not":{"type":"object","properties":{}}})") ==
          "\"not\" with keywords other than type is not supported at /not");
    CHECK(error_of(R"({"type":"string","not":{"type":"string"}})") ==
          "\"not\" excludes every type the schema allows at /");
    CHECK(error_of(R"({"not":{"type":"integer"},"minimum":1})") ==
          "a non-integer number beside bounds or multipleOf is not supported at /");
  }

  TEST_CASE("unsupported keywords are errors naming the keyword and its pointer; annotations are ignored") {
    CHECK(error_of(R"({"properties":{"a":{"patternProperties":{"x":{}}}}})") ==
          "unsupported JSON Schema keyword \"patternProperties\" at /properties/a");
    CHECK(error_of(R"({"items":{"contains":{}}})") == "unsupported JSON Schema keyword \"contains\" at /items");
    CHECK(error_of(R"({"anyOf":[{},{"if":{}}]})") == "unsupported JSON Schema keyword \"if\" at /anyOf/1");
    CHECK(error_of(R"({"properties":{"a/b":{"propertyNames":{}}}})") ==
          "unsupported JSON Schema keyword \"propertyNames\" at /properties/a~1b");
    CHECK(error_of(R"({"type":"array","uniqueItems":true})") ==
          "unsupported JSON Schema keyword \"uniqueItems\" (true) at /");
    CHECK(error_of(R"({"foo":1})") == "unsupported JSON Schema keyword \"foo\" at /");
    CHECK(error_of(R"({"type":"strin"})") == "unknown type \"strin\" at /type");
    CHECK(error_of("{") .find("JSON Schema: not valid JSON") == 0);
    CHECK(error_of(R"({"title":"t","description":"d","default":1,"examples":[1],"$schema":"x","$id":"y",)"
                   R"("$comment":"c","deprecated":false,"readOnly":true,"writeOnly":false})") == "(no error)");
  }

  TEST_CASE("limits: repetition counts, nesting depth and grammar size are refused quickly") {
    CHECK(error_of(R"({"type":"array","maxItems":10001})") == "\"maxItems\" above the limit of 10000 at /");
    CHECK(error_of(R"({"type":"string","minLength":20000})") == "\"minLength\" above the limit of 10000 at /");
    CHECK(Schema(R"({"type":"string","maxLength":10000})").accepts(R"("ok")"));
    std::string deep = "{}";
    for (int i = 0; i < 200; ++i) deep = R"({"type":"array","items":)" + deep + "}";
    CHECK(error_of(deep).find("schema nesting deeper than 128") == 0);
    // JSON nested past the stack is refused before anything copies it (enum values, items, as text or as a value).
    const std::string deep_enum = R"({"enum":[)" + std::string(100000, '[') + std::string(100000, ']') + "]}";
    CHECK(error_of(deep_enum) == "JSON Schema: nested deeper than 512 levels");
    const std::string deep_items = R"({"items":)" + std::string(100000, '[') + std::string(100000, ']') + "}";
    CHECK(error_of(deep_items) == "JSON Schema: nested deeper than 512 levels");
    CHECK_THROWS_WITH_AS(json_schema_to_gbnf(nlohmann::json::parse(deep_enum)),
                         "JSON Schema: nested deeper than 512 levels", GrammarError);
    const std::string deep_pattern = R"({"pattern":")" + std::string(20000, '(') + "a" + std::string(20000, ')') + "\"}";
    CHECK(error_of(deep_pattern).find("regex: groups nested deeper than 256") == 0);
    // Many prefixItems: rules, not parentheses nested thousands deep.
    std::string tuple = R"({"prefixItems":[)";
    for (int i = 0; i < 5000; ++i) tuple += (i ? "," : "") + std::string(R"({"type":"integer"})");
    tuple += R"(],"minItems":2})";
    const Schema long_tuple(tuple);
    CHECK(long_tuple.accepts("[1,2,3]"));
    CHECK(!long_tuple.accepts("[1]"));
    CHECK(!long_tuple.accepts(R"([1,"x"])"));
    std::string wide = R"({"type":"object","properties":{)";
    for (int i = 0; i < 20000; ++i) wide += (i ? "," : "") + std::string("\"property_number_") + std::to_string(i) + R"(":{"type":"string","format":"date-time"})";
    wide += "}}";
    CHECK(error_of(wide).find("exceeds") != std::string::npos);
    // anyOf distributing over anyOf: multiplicative growth stops at the size limit.
    std::string blowup = "{}";
    for (int i = 0; i < 40; ++i) {
      blowup = R"({"type":"object","properties":{"p":)" + blowup + R"(},"anyOf":[{"required":["a"]},{"required":["b"]},{"required":["c"]}]})";
    }
    CHECK(error_of(blowup).find("exceeds") != std::string::npos);
    // An allOf reaching each $ref of a chain twice doubles the merges per level: refused by the merge budget,
    // not after hours (tests/fuzz/corpus/json_schema/regression-allof-ref-fanout).
    std::string fanout = R"({"$ref":"#/$defs/d0","$defs":{)";
    for (int i = 0; i < 30; ++i) {
      const std::string next = "#/$defs/d" + std::to_string(i + 1);
      fanout += "\"d" + std::to_string(i) + R"(":{"allOf":[{"$ref":")" + next + R"("},{"$ref":")" + next + R"("}]},)";
    }
    fanout += R"("d30":{"type":"integer"}}})";
    CHECK(error_of(fanout).find("allOf / $ref merges") != std::string::npos);
    // 20 000 enum values: duplicates dropped in linear time (regression-enum-many-values).
    std::string many = R"({"enum":[)";
    for (int i = 0; i < 20000; ++i) many += (i ? ",\"v" : "\"v") + std::to_string(i % 15000) + "\"";
    many += "]}";
    CHECK(Schema(many).accepts(R"("v14999")"));
    CHECK(!Schema(many).accepts(R"("v15000")"));
  }

  TEST_CASE("json_object_gbnf and any_json_gbnf") {
    const auto object = parse_gbnf(json_object_gbnf());
    const auto value = parse_gbnf(any_json_gbnf());
    auto accepts = [](const std::shared_ptr<const Grammar>& g, std::string_view t) {
      Matcher m(g, single_bytes());
      return m.accept_bytes(t) && m.can_end();
    };
    CHECK(accepts(object, R"({"a":[1,{"b":"c"}],"d":null})"));
    CHECK(!accepts(object, "[1]"));
    CHECK(accepts(value, "[1]"));
    CHECK(accepts(value, "-1.5e3"));
  }

  TEST_CASE("random schemas: a grammar parse_gbnf takes, or a GrammarError, nothing else") {
    std::mt19937 rng(99);
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
    using Json = nlohmann::ordered_json;
    std::function<Json(int)> gen = [&](int depth) -> Json {
      if (depth > 3 || pick(5) == 0) {
        const Json leaves[] = {Json::parse(R"({"type":"integer","minimum":-5,"exclusiveMaximum":70})"),
                               Json::parse(R"({"type":"string","maxLength":3})"), Json::parse(R"({"enum":[1,"a",null]})"),
                               Json::parse(R"({"type":"number","maximum":2.5})"), Json::parse(R"({"format":"date"})"),
                               Json::parse(R"({"pattern":"^a+b?$"})"), Json(true), Json(false), Json::parse(R"({"const":[1]})"),
                               Json::parse(R"({"$ref":"#"})"), Json::parse(R"({"type":["null","boolean"]})"), Json::object(),
                               Json::parse(R"({"multipleOf":3})")};
        return leaves[pick(13)];
      }
      Json s = Json::object();
      switch (pick(6)) {
        case 0:
          s["type"] = "object";
          s["properties"] = Json::object();
          for (int i = 0, n = pick(4); i < n; ++i) s["properties"][std::string(1, char('a' + pick(4)))] = gen(depth + 1);
          if (pick(2)) s["required"] = Json::array({"a", "c"});
          if (pick(2)) s["additionalProperties"] = pick(2) ? Json(false) : gen(depth + 1);
          break;
        case 1:
          s["items"] = gen(depth + 1);
          if (pick(2)) s["prefixItems"] = Json::array({gen(depth + 1), gen(depth + 1)});
          if (pick(2)) s["minItems"] = pick(3);
          if (pick(2)) s["maxItems"] = pick(4);
          break;
        case 2:
        case 3: {
          const char* k[] = {"anyOf", "oneOf", "allOf"};
          s[k[pick(3)]] = Json::array({gen(depth + 1), gen(depth + 1)});
          if (pick(2)) s["type"] = pick(2) ? "object" : "integer";
          break;
        }
        case 4:
          s["$defs"] = Json{{"d", gen(depth + 1)}};
          s["$ref"] = "#/$defs/d";
          if (pick(2)) s["minimum"] = 1;
          break;
        default:
          s = gen(depth + 1);
          if (s.is_object()) s["title"] = "t";
      }
      return s;
    };
    int compiled = 0, refused = 0;
    for (int round = 0; round < 400; ++round) {
      const Json schema = gen(0);
      std::string gbnf;
      try {
        gbnf = json_schema_to_gbnf(schema);
      } catch (const GrammarError&) {
        ++refused;
        continue;
      }
      CAPTURE(schema.dump());
      try {
        parse_gbnf(gbnf);
        ++compiled;
      } catch (const GrammarError& e) {
        // A schema that refers to itself before consuming anything ({"anyOf":[{"$ref":"#"}]}) is left
        // recursive: the parser refuses it, and that is the only refusal allowed here.
        CHECK(std::string(e.what()).find("left recursion") != std::string::npos);
      }
    }
    CHECK(compiled > 100);
    MESSAGE(compiled << " random schemas compiled, " << refused << " refused");
  }

  TEST_CASE("property order follows the schema text (ordered_json keeps it)") {
    const Schema s(R"({"properties":{"z":{"type":"integer"},"a":{"type":"integer"}},"required":["z","a"]})");
    CHECK(s.accepts(R"({"z":1,"a":2})"));
    CHECK(!s.accepts(R"({"a":2,"z":1})"));
    // A nlohmann::json sorts its keys: the properties come out alphabetically.
    const nlohmann::json sorted = nlohmann::json::parse(R"({"properties":{"z":{"type":"integer"},"a":{"type":"integer"}},"required":["z","a"]})");
    const auto g = parse_gbnf(json_schema_to_gbnf(sorted));
    Matcher m(g, single_bytes());
    CHECK((m.accept_bytes(R"({"a":2,"z":1})") && m.can_end()));
  }
}
