#include "server/webui.h"

namespace inflight::server {

const WebAsset* find_web_asset(std::string_view path) {
  constexpr std::string_view kPrefix = "/webui/";
  std::string_view name;
  if (path == "/") name = "index.html";
  else if (path.substr(0, kPrefix.size()) == kPrefix) name = path.substr(kPrefix.size());
  else return nullptr;
  for (const WebAsset& asset : web_assets())
    if (asset.name == name) return &asset;
  return nullptr;
}

std::string_view web_content_type(std::string_view name) {
  auto ends_with = [&](std::string_view ext) {
    return name.size() >= ext.size() && name.substr(name.size() - ext.size()) == ext;
  };
  if (ends_with(".html")) return "text/html; charset=utf-8";
  if (ends_with(".css")) return "text/css; charset=utf-8";
  if (ends_with(".js") || ends_with(".mjs")) return "text/javascript; charset=utf-8";
  if (ends_with(".svg")) return "image/svg+xml";
  if (ends_with(".json")) return "application/json";
  if (ends_with(".png")) return "image/png";
  if (ends_with(".ico")) return "image/x-icon";
  return "application/octet-stream";
}

}  // namespace inflight::server
