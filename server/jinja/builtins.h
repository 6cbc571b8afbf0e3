// What templates call: Python's operations on values (attribute and item lookup, slices, iteration,
// membership), the methods of str / dict / list, Jinja's filters and tests, and the globals a chat
// template may use (range, namespace, dict, raise_exception, strftime_now, ...).
#pragma once
#include <string>

#include "server/jinja/value.h"

namespace inflight::server::jinja {

// a.name: a dict's key (else its method), a str / list / dict method bound to `obj`, a namespace's
// attribute; undefined when there is none (also on undefined and None, as Hugging Face's renderer does).
Value get_attr(const Value& obj, const std::string& name);
// a[key]: dict key, list or str index (negative from the end); undefined when absent.
Value get_item(const Value& obj, const Value& key);
// a[start:stop:step] of a list or str; undefined bounds are left out.
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// The items a for loop visits: a list's items, a dict's keys, a str's characters; none for undefined.
Array iterate(const Value& v);
// `item in container`.
bool contains(const Value& container, const Value& item);

// Throw Error (Render) for an unknown name or a wrong argument.
Value call_filter(const std::string& name, const Value& operand, const Args& args);
bool call_test(const std::string& name, const Value& operand, const Args& args);

// The globals every render starts with.
Object make_globals();

}  // namespace inflight::server::jinja
