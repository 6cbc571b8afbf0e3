#!/usr/bin/env bash
# Installs every Debian 12 package inflight needs to build, test and benchmark. Idempotent.
# Usage: scripts/install-deps.sh [--build-only]
#   --build-only  only what building the `inflight` executable needs (the Docker images' build stage):
#                 no test, benchmark or docker tooling, no Node.js
set -euo pipefail
build_only=0
case "${1:-}" in
  --build-only) build_only=1 ;;
  "") ;;
  *) echo "install-deps: unknown argument '$1' (usage: scripts/install-deps.sh [--build-only])" >&2; exit 2 ;;
esac
packages=(
  g++ cmake ninja-build pkg-config
  libboost-dev libboost-system-dev    # Asio / Beast (header-only) for the HTTP server
  nlohmann-json3-dev                  # JSON: configs, HF config.json, safetensors headers, the API
  libspdlog-dev                       # logging
  libsentencepiece-dev                # tokenizer: sentencepiece vocabularies
  libpcre2-dev libutf8proc-dev        # tokenizer: BPE split patterns (Unicode properties), NFC / NFKC
  libcli11-dev                        # command line
)
if [ "$build_only" -eq 0 ]; then
  packages+=(
    build-essential git ca-certificates
    doctest-dev                         # unit tests
    libbenchmark-dev                    # bench/ micro-benchmarks
    python3                             # test helpers, the chaos soak (scripts/soak.py)
    clang libclang-rt-14-dev            # libFuzzer targets (scripts/fuzz.sh): clang 14 and its fuzzer/sanitizer runtimes
    llvm                                # llvm-symbolizer: file:line in sanitizer and fuzzer reports
    docker-compose                      # tests validate docker/docker-compose.yml (`docker-compose config`, no engine)
    chromium                            # the web page test drives it with playwright-core (ctest webui)
  )
  # Node.js and npm run the Node.js checks (ctest openai_client, webui, chat_templates, tokenizers). A node
  # already on the PATH (NodeSource's bundles npm) is kept: Debian's npm package would conflict with it.
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    packages+=(nodejs npm)
  fi
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
