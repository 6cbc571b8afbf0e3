// Server settings: configs/server.json holds exactly the defaults; bad files and values are refused
// naming the key; memory sizes parse as bytes, suffixes or a share of RAM (a container's memory limit
// where that is lower).
#include <doctest/doctest.h>

#include <fstream>

#include "server/server_config.h"
#include "test_support.h"

using namespace inflight;

TEST_SUITE("server config") {
  TEST_CASE("configs/server.json lists every setting with its default") {
    const server::ServerConfig from_file = server::load_server_config(std::string(INFLIGHT_SOURCE_DIR) + "/configs/server.json");
    CHECK(server::to_json(from_file) == server::to_json(server::ServerConfig{}));
    std::ifstream in(std::string(INFLIGHT_SOURCE_DIR) + "/configs/server.json");
    const nlohmann::json raw = nlohmann::json::parse(in);
    CHECK(raw.size() == server::to_json(server::ServerConfig{}).size());
    server::validate(from_file);
  }

  TEST_CASE("unknown keys and wrong types name the key") {
    server::ServerConfig c;
    CHECK_THROWS_WITH_AS(server::apply_json({{"prot", 80}}, "f.json", &c), doctest::Contains("\"prot\""), std::invalid_argument);
    CHECK_THROWS_WITH_AS(server::apply_json({{"port", "80"}}, "f.json", &c), doctest::Contains("\"port\""), std::invalid_argument);
    server::apply_json({{"port", 9000}, {"api_key", "k"}}, "f.json", &c);
    CHECK(c.port == 9000);
    CHECK(c.api_key == "k");
    CHECK(c.webui);
    server::apply_json({{"webui", false}}, "f.json", &c);
    CHECK_FALSE(c.webui);
    CHECK_THROWS_WITH_AS(server::apply_json({{"webui", "off"}}, "f.json", &c), doctest::Contains("\"webui\""), std::invalid_argument);
    c.kv_block_size = 12;
    CHECK_THROWS_WITH_AS(server::validate(c), doctest::Contains("kv_block_size"), std::invalid_argument);
    c = {};
    c.chat_template = "jinja";
    CHECK_THROWS_WITH_AS(server::validate(c), doctest::Contains("chat_template"), std::invalid_argument);
    c.chat_template = std::string(300, 'l');  // longer than a file name may be: no file, not an exception (fuzz)
    CHECK_THROWS_WITH_AS(server::validate(c), doctest::Contains("chat_template"), std::invalid_argument);
    c = {};
    server::apply_json({{"max_step_ms", 12.5}}, "f.json", &c);
    CHECK(c.max_step_ms == 12.5);
    server::validate(c);
    CHECK_THROWS_WITH_AS(server::apply_json({{"max_step_ms", "fast"}}, "f.json", &c), doctest::Contains("\"max_step_ms\""),
                         std::invalid_argument);
    c.max_step_ms = -1;
    CHECK_THROWS_WITH_AS(server::validate(c), doctest::Contains("max_step_ms"), std::invalid_argument);
    c = {};
    CHECK(c.prefill_order == "short-first");
    server::apply_json({{"prefill_order", "fcfs"}}, "f.json", &c);
    CHECK(c.prefill_order == "fcfs");
    server::validate(c);
    c.prefill_order = "shortest";
    CHECK_THROWS_WITH_AS(server::validate(c), doctest::Contains("prefill_order must be one of fcfs, short-first"),
                         std::invalid_argument);
  }

  TEST_CASE("memory sizes") {
    const int64_t ram = int64_t(16) << 30;
    CHECK(server::parse_memory_size("1048576", ram) == 1048576);
    CHECK(server::parse_memory_size("512K", ram) == 512 << 10);
    CHECK(server::parse_memory_size("64M", ram) == int64_t(64) << 20);
    CHECK(server::parse_memory_size("2G", ram) == int64_t(2) << 30);
    CHECK(server::parse_memory_size("1.5GiB", ram) == int64_t(3) << 29);
    CHECK(server::parse_memory_size("25%", ram) == int64_t(4) << 30);
    for (const char* bad : {"", "abc", "-1G", "0", "12X", "150%", "5 %"}) {
      CAPTURE(bad);
      CHECK_THROWS_AS(server::parse_memory_size(bad, ram), std::invalid_argument);
    }
  }

  TEST_CASE("a cgroup memory limit (v2 or v1) caps the RAM a share is taken of; no limit reads as 0") {
    test::TempDir dir("cgroup");
    const std::string root = dir.path.string();
    CHECK(server::cgroup_memory_limit_bytes(root) == 0);  // no cgroup files
    std::ofstream(root + "/memory.max") << "max\n";
    CHECK(server::cgroup_memory_limit_bytes(root) == 0);
    std::ofstream(root + "/memory.max") << "536870912\n";
    CHECK(server::cgroup_memory_limit_bytes(root) == 536870912);

    test::TempDir v1("cgroup-v1");
    std::filesystem::create_directories(v1.path / "memory");
    std::ofstream((v1.path / "memory" / "memory.limit_in_bytes").string()) << "9223372036854771712\n";
    CHECK(server::cgroup_memory_limit_bytes(v1.path.string()) == 0);
    std::ofstream((v1.path / "memory" / "memory.limit_in_bytes").string()) << "2147483648\n";
    CHECK(server::cgroup_memory_limit_bytes(v1.path.string()) == 2147483648);

    CHECK(server::physical_memory_bytes() > 0);
  }
}
