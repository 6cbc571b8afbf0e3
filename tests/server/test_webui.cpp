// The embedded web page: every file of server/webui/ is in the executable byte for byte, found at its
// path, with its Content-Type.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "server/webui.h"

using namespace inflight::server;

namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in, path.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_SUITE("webui") {
  TEST_CASE("every file of server/webui/ is embedded byte for byte") {
    const std::filesystem::path dir = std::filesystem::path(INFLIGHT_SOURCE_DIR) / "server" / "webui";
    std::set<std::string> on_disk, embedded;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) on_disk.insert(entry.path().filename().string());
    for (const WebAsset& asset : web_assets()) {
      embedded.insert(std::string(asset.name));
      CAPTURE(asset.name);
      CHECK(asset.body == read_file(dir / asset.name));
    }
    CHECK(embedded == on_disk);  // a new file must be listed in server/CMakeLists.txt
  }

  TEST_CASE("paths: / is index.html, /webui/<name> a file, anything else nothing") {
    const WebAsset* index = find_web_asset("/");
    REQUIRE(index != nullptr);
    CHECK(index->name == "index.html");
    CHECK(index->body.find("<!doctype html>") == 0);
    REQUIRE(find_web_asset("/webui/app.js") != nullptr);
    CHECK(find_web_asset("/webui/app.js")->name == "app.js");
    CHECK(find_web_asset("/webui/") == nullptr);
    CHECK(find_web_asset("/webui/missing.js") == nullptr);
    CHECK(find_web_asset("/webui/../CMakeLists.txt") == nullptr);
    CHECK(find_web_asset("/app.js") == nullptr);
    CHECK(find_web_asset("") == nullptr);
  }

  TEST_CASE("content types by extension") {
    CHECK(web_content_type("index.html") == "text/html; charset=utf-8");
    CHECK(web_content_type("style.css") == "text/css; charset=utf-8");
    CHECK(web_content_type("app.js") == "text/javascript; charset=utf-8");
    CHECK(web_content_type("icon.svg") == "image/svg+xml");
    CHECK(web_content_type("README") == "application/octet-stream");
  }
}
