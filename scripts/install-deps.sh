#!/usr/bin/env bash
# Installs every Debian 12 package inflight needs to build, test and benchmark. Idempotent.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libboost-dev libboost-system-dev    # Asio / Beast (header-only) for the HTTP server
  nlohmann-json3-dev                  # JSON: configs, HF config.json, safetensors headers, the API
  libspdlog-dev                       # logging
  libsentencepiece-dev                # tokenizer
  doctest-dev                         # unit tests
  libcli11-dev                        # command line
  libbenchmark-dev                    # bench/ micro-benchmarks
  python3                             # test helpers, the chaos soak (scripts/soak.py)
  clang libclang-rt-14-dev            # libFuzzer targets (scripts/fuzz.sh): clang 14 and its fuzzer/sanitizer runtimes
  llvm                                # llvm-symbolizer: file:line in sanitizer and fuzzer reports
  docker-compose                      # tests validate docker/docker-compose.yml (`docker-compose config`, no engine)
)
# Node.js and npm run the official OpenAI client against the server (ctest openai_client). A node already on
# the PATH (NodeSource's bundles npm) is kept: Debian's npm package would conflict with it.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  packages+=(nodejs npm)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-deps: installed ${missing[*]}"
