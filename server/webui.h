// The built-in web page (GET /): the files of server/webui/, embedded in the executable at build time by
// server/embed_webui.cmake (web_assets() is generated), and their Content-Types.
#pragma once
#include <span>
#include <string_view>

namespace inflight::server {

struct WebAsset {
  std::string_view name;  // path relative to server/webui/, e.g. "app.js"
  std::string_view body;  // the file's bytes
};

// Every embedded file (generated).
std::span<const WebAsset> web_assets();
// The file served at `path` ("/" is index.html, "/webui/<name>" a file), or null.
const WebAsset* find_web_asset(std::string_view path);
// The Content-Type for a file name, by its extension.
std::string_view web_content_type(std::string_view name);

}  // namespace inflight::server
