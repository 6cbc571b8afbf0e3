// The JSON config loader (`inflight serve --config`): any bytes give a ServerConfig that validate()
// accepts, or std::invalid_argument naming the file and the problem. Anything else escaping is a finding.
#include <cstdint>
#include <stdexcept>

#include "fuzz_support.h"
#include "server/server_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = inflight::fuzz::bytes_file(data, size);
  try {
    const inflight::server::ServerConfig config = inflight::server::load_server_config(path);
    inflight::server::validate(config);
    // Round trip: what to_json writes reads back to the same settings.
    inflight::server::ServerConfig again;
    inflight::server::apply_json(inflight::server::to_json(config), "round trip", &again);
    if (inflight::server::to_json(again) != inflight::server::to_json(config)) __builtin_trap();
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
