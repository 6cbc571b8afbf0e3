#!/usr/bin/env bash
# Exits 0 when GET /health on the local inflight server answers 200 (ready), 1 otherwise (503 while
# loading, or no answer). Uses bash's /dev/tcp: the runtime image carries no curl.
set -uo pipefail
port="${INFLIGHT_PORT:-8000}"
exec 3<>"/dev/tcp/127.0.0.1/${port}" || exit 1
printf 'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' >&3
IFS= read -r -t 5 status_line <&3 || exit 1
[[ "$status_line" == "HTTP/1.1 200"* ]]
