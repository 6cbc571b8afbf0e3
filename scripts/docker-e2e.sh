#!/usr/bin/env bash
# The docker-compose deployment, run for real on a Docker engine (CI runs it after scripts/test.sh):
#   setup     docker.io and debootstrap where missing; dockerd unless one runs; the base images debian:12 and
#             debian:12-slim made with debootstrap, and an nginx image built from them (nothing is pulled)
#   build     docker/Dockerfile through compose; the runtime image's size (at most 100 MB)
#   serve     the built-in model, then a model mounted from the host: healthy, a completion and a streamed
#             chat request from the host
#   load      `docker-compose run --rm bench`: every request succeeds
#   replicas  3 servers behind nginx under `inflight bench`; one server process is killed (-9) mid-run: only
#             requests that were on it may fail, no other waits more than 3 s extra, and the server comes back
#             through its restart policy, turns healthy and takes load again
#   drain     `docker-compose stop replica-1` under load: it answers new requests 503 (nginx moves them), its
#             streams finish, it exits 0 and no request fails; then `docker-compose stop` of everything under
#             load: every container exits 0 and no stream that started is cut
#   cleanup   `down` leaves no container or network; a dockerd started here is stopped (by PID)
# One summary line per stage; the whole summary also goes to $OUT/summary.txt. Takes ~13 minutes on 2
# cores, most of it the image build (docs/DEPLOYMENT.md). Usage: scripts/docker-e2e.sh (as root, or with sudo)
# Settings: INFLIGHT_E2E_OUT (default build/docker-e2e), INFLIGHT_E2E_MODEL_DIR (a folder holding
# stories260K.gguf; default tests/data/models/stories260K, else a model made with `inflight make-model`),
# INFLIGHT_E2E_PORT / INFLIGHT_E2E_LB_PORT (host ports, default 18000 / 18080).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

readonly project=inflight-e2e
readonly image=inflight:cpu
readonly lb_image=inflight-e2e-nginx:bookworm
readonly max_image_mb=100
out="${INFLIGHT_E2E_OUT:-$root/build/docker-e2e}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
work="$(mktemp -d /tmp/inflight-e2e.XXXXXX)"
chmod 777 "$work"  # the bench container (uid 10001) writes its result files here
summary="$out/summary.txt"
: >"$summary"
script_start=$(date +%s)
started_dockerd_pid=""
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

# The compose project's settings: host ports, the local nginx image, 1 compute thread per server (the
# machines are small), health checks every 2 s.
export INFLIGHT_PUBLISH_PORT="${INFLIGHT_E2E_PORT:-18000}"
export INFLIGHT_LB_PUBLISH_PORT="${INFLIGHT_E2E_LB_PORT:-18080}"
export INFLIGHT_LB_IMAGE="$lb_image"
export INFLIGHT_IMAGE="$image"
export INFLIGHT_THREADS=1
export INFLIGHT_HEALTH_INTERVAL=2s
unset INFLIGHT_MODEL INFLIGHT_MODEL_DIR INFLIGHT_BENCH_URL

compose() { $SUDO docker-compose -f docker/docker-compose.yml -p "$project" --profile replicas --profile bench "$@"; }
docker() { if [ -n "$SUDO" ]; then sudo docker "$@"; else command docker "$@"; fi; }

report() {  # stage, words of the line...
  local stage=$1
  shift
  printf 'docker-e2e: %-9s %s\n' "$stage:" "$*" | tee -a "$summary"
}
fail() {
  report "FAILED" "$*"
  exit 1
}
elapsed() { echo $(($(date +%s) - $1)); }

on_exit() {
  local code=$?
  if [ $code -ne 0 ]; then
    echo "docker-e2e: failed (exit $code); the last log lines of each container:" >&2
    for c in $(docker ps -aq --filter "label=com.docker.compose.project=$project" 2>/dev/null); do
      echo "--- $(docker inspect -f '{{.Name}}' "$c")" >&2
      docker logs --tail 30 "$c" >&2 2>&1 || true
    done
    compose down --remove-orphans -t 5 >/dev/null 2>&1 || true
  fi
  if [ -n "$started_dockerd_pid" ]; then
    $SUDO kill "$started_dockerd_pid" 2>/dev/null || true
    for _ in $(seq 60); do $SUDO kill -0 "$started_dockerd_pid" 2>/dev/null || break; sleep 0.5; done
  fi
  rm -rf "$work" 2>/dev/null || $SUDO rm -rf "$work"
  exit $code
}
trap on_exit EXIT

cid() { compose ps -q "$1"; }

# Waits until the service's container reports healthy; prints the seconds it took.
wait_healthy() {  # service, timeout_s
  local start now status
  start=$(date +%s)
  while :; do
    status="$(docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{end}}' "$(cid "$1")" 2>/dev/null || true)"
    [ "$status" = healthy ] && break
    now=$(date +%s)
    [ $((now - start)) -lt "$2" ] || fail "$1 not healthy after $2 s (status '$status')"
    sleep 0.5
  done
  elapsed "$start"
}

# `inflight bench` in a container on the compose network (no dependencies started), writing its result
# file to $work. Extra arguments follow the common ones.
bench() {  # name, url, extra args...
  local name=$1 url=$2
  shift 2
  compose run --rm -T --no-deps -v "$work:/out" bench bench --base-url "$url" --vocab-size 512 --seed 7 \
    --result-file "/out/$name.json" --ready-timeout 60 "$@"
}

# Blocks until the bench log shows at least `percent` of its requests done.
wait_progress() {  # log, percent, timeout_s
  local start line done total
  start=$(date +%s)
  while :; do
    line="$(grep -oE '[0-9]+/[0-9]+ requests' "$1" 2>/dev/null | tail -1 || true)"
    if [ -n "$line" ]; then
      done=${line%%/*}
      total=${line#*/}
      total=${total%% *}
      [ $((done * 100)) -lt $(($2 * total)) ] || return 0
    fi
    [ "$(elapsed "$start")" -lt "$3" ] || fail "bench made no progress ($1): $(tail -3 "$1")"
    sleep 0.2
  done
}

report_value() {  # bench log, label
  grep -E "^$2" "$1" | head -1 | awk '{print $NF}'
}

# Completions a service's server answered with 200 since a time (docker logs --since).
num_served() {  # service, since
  docker logs --since "$2" "$(cid "$1")" 2>&1 | grep -c '"POST /v1/completions" 200' || true
}

# ------------------------------------------------------------------------------------------------ setup
stage_start=$(date +%s)
need=()
command -v docker >/dev/null 2>&1 && command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v python3 >/dev/null 2>&1 || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if ! docker info >/dev/null 2>&1; then
  $SUDO dockerd >"$out/dockerd.log" 2>&1 &
  started_dockerd_pid=$!
  for _ in $(seq 120); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
  docker info >/dev/null 2>&1 || fail "dockerd did not start (see $out/dockerd.log)"
fi
# Leftovers of an interrupted run.
compose down --remove-orphans -t 1 >/dev/null 2>&1 || true

# The apt mirror of this machine: debootstrap's source, and what the images' apt uses.
mirror="$(grep -hsE '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list |
  grep -oE 'https?://[^ ]+' | grep -v -e security -e nodesource -e google | head -1 || true)"
mirror="${mirror:-http://deb.debian.org/debian}"
made=()
if ! docker image inspect debian:12 >/dev/null 2>&1; then
  rootfs="$work/rootfs"
  $SUDO debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$out/debootstrap.log" 2>&1 ||
    fail "debootstrap bookworm from $mirror (see $out/debootstrap.log)"
  # As Debian's own slim images: no downloaded packages, apt lists, documentation or translations, and dpkg
  # told to leave documentation out of later installs (the runtime image stays small).
  $SUDO rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/doc/* \
    "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/*
  printf '%s\n' 'path-exclude /usr/share/doc/*' 'path-include /usr/share/doc/*/copyright' 'path-exclude /usr/share/man/*' \
    'path-exclude /usr/share/info/*' 'path-exclude /usr/share/locale/*' | $SUDO tee "$rootfs/etc/dpkg/dpkg.cfg.d/docker-slim" >/dev/null
  # apt as in Debian's images: no package caches (pkgcache.bin alone is ~40 MB) and no downloaded .debs kept.
  printf '%s\n' 'Dir::Cache::pkgcache ""; Dir::Cache::srcpkgcache "";' \
    'DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };' \
    'APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };' |
    $SUDO tee "$rootfs/etc/apt/apt.conf.d/docker-clean" >/dev/null
  $SUDO tar -C "$rootfs" -c . | docker import - debian:12 >/dev/null
  $SUDO rm -rf "$rootfs"
  made+=(debian:12)
fi
docker image inspect debian:12-slim >/dev/null 2>&1 || { docker tag debian:12 debian:12-slim; made+=(debian:12-slim); }
if ! docker image inspect "$lb_image" >/dev/null 2>&1; then
  docker build -q -t "$lb_image" - >"$out/nginx-build.log" 2>&1 <<'EOF' || fail "the nginx image (see $out/nginx-build.log)"
FROM debian:12-slim
RUN apt-get update && apt-get install -y --no-install-recommends nginx && rm -rf /var/lib/apt/lists/*
CMD ["nginx", "-g", "daemon off;"]
EOF
  made+=("$lb_image")
fi
report setup "docker $(docker version -f '{{.Server.Version}}'), $(docker-compose version --short 2>/dev/null || echo '?');" \
  "made ${made[*]:-no image (all present)} from $mirror; $(elapsed "$stage_start") s"

# ------------------------------------------------------------------------------------------------ build
stage_start=$(date +%s)
compose build server >"$out/build.log" 2>&1 || fail "image build (see $out/build.log)"
size_bytes=$(docker image inspect -f '{{.Size}}' "$image")
size_mb=$(awk -v b="$size_bytes" 'BEGIN {printf "%.1f", b / 1e6}')
report build "$image $size_mb MB (limit $max_image_mb MB), built in $(elapsed "$stage_start") s"
[ "$size_bytes" -le $((max_image_mb * 1000000)) ] || fail "the runtime image is $size_mb MB, over $max_image_mb MB"

# ------------------------------------------------------------------------------------------------ serve
# Host requests: a completion, and a streamed chat that ends with [DONE].
host_requests() {  # what
  local port=$INFLIGHT_PUBLISH_PORT model completion chat
  model="$(curl -sf "http://127.0.0.1:$port/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')" ||
    fail "$1: GET /v1/models"
  completion="$(curl -sf "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "Once upon a time", "max_tokens": 16}')" || fail "$1: POST /v1/completions"
  python3 -c 'import json,sys; j=json.loads(sys.argv[1]); assert j["usage"]["completion_tokens"] > 0' "$completion" ||
    fail "$1: the completion has no tokens: $completion"
  chat="$(curl -sfN "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": 16, "stream": true}')" ||
    fail "$1: streamed POST /v1/chat/completions"
  [ "$(printf '%s\n' "$chat" | grep -c '^data: ')" -ge 3 ] && printf '%s\n' "$chat" | grep -q '^data: \[DONE\]' ||
    fail "$1: the streamed chat did not end with [DONE]: $chat"
  echo "model '$model', completion and streamed chat ok"
}
stage_start=$(date +%s)
compose up -d server >"$out/serve.log" 2>&1 || fail "up server (see $out/serve.log)"
t_default=$(wait_healthy server 120)
default_result="$(host_requests "built-in model")"
model_dir="${INFLIGHT_E2E_MODEL_DIR:-$root/tests/data/models/stories260K}"
if [ ! -f "$model_dir/stories260K.gguf" ]; then
  model_dir="$work/models"
  mkdir -p "$model_dir" && chmod 777 "$model_dir"
  docker run --rm -v "$model_dir:/out" "$image" make-model --preset tiny -o /out/stories260K.gguf >/dev/null
fi
export INFLIGHT_MODEL_DIR="$model_dir" INFLIGHT_MODEL=/models/stories260K.gguf
compose up -d server >>"$out/serve.log" 2>&1 || fail "up server with $model_dir (see $out/serve.log)"
t_mounted=$(wait_healthy server 120)
mounted_result="$(host_requests "host-mounted model")"
report serve "built-in model healthy in $t_default s, $default_result;" \
  "$model_dir mounted: healthy in $t_mounted s, $mounted_result; $(elapsed "$stage_start") s"

# ------------------------------------------------------------------------------------------------ load
stage_start=$(date +%s)
INFLIGHT_BENCH_NUM_PROMPTS=64 compose run --rm -T bench >"$out/load.log" 2>&1 ||
  fail "run --rm bench failed (see $out/load.log): $(grep -A3 'Failed requests' "$out/load.log" | head -8)"
report load "run --rm bench: $(report_value "$out/load.log" 'Successful requests')/64 requests ok, " \
  "$(report_value "$out/load.log" 'Output token throughput') tok/s out, median TTFT" \
  "$(report_value "$out/load.log" 'Median TTFT') ms; $(elapsed "$stage_start") s"
compose stop server >/dev/null 2>&1

# ------------------------------------------------------------------------------------------------ replicas
stage_start=$(date +%s)
compose up -d lb >"$out/replicas.log" 2>&1 || fail "up lb (see $out/replicas.log)"
for r in replica-1 replica-2 replica-3; do wait_healthy $r 120 >/dev/null; done
lb_url=http://lb:8000
# Load that lasts ~10 s whatever the servers' speed: 250 streams of 480 tokens arriving at 25/s, more than
# 3 servers with 1 thread each generate, so ~24 streams run at any time (the concurrency limit) and each
# server has several running when it is killed or stopped.
num_prompts=250
load=(--num-prompts $num_prompts --request-rate 25 --max-concurrency 24 --input-len 16 --output-len 480)
concurrency=24
run_start="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
bench crash "$lb_url" "${load[@]}" --max-failures $concurrency >"$out/crash.log" 2>&1 &
bench_pid=$!
wait_progress "$out/crash.log" 30 300
victim="$(cid replica-2)"
# From the host, by host PID: the server is the child of the container's init (docker-init). A `docker exec`
# inside the container dies with it, and its exit status (137) could end this script before it reported.
init_pid=$(docker inspect -f '{{.State.Pid}}' "$victim")
on_victim=()
for p in /proc/[0-9]*; do
  [ "$(cat "$p/comm" 2>/dev/null)" = inflight ] && [ "$(awk '/^PPid:/ {print $2}' "$p/status" 2>/dev/null)" = "$init_pid" ] &&
    on_victim+=("${p#/proc/}")
done
[ ${#on_victim[@]} = 1 ] || fail "replica-2: found ${#on_victim[@]} inflight process(es) under its init (pid $init_pid)"
$SUDO kill -9 "${on_victim[0]}"
killed_at=$(date +%s)
kill -0 "$bench_pid" 2>/dev/null || fail "the load ended before the kill: nothing was tested"
for _ in $(seq 150); do [ "$(docker inspect -f '{{.RestartCount}}' "$victim")" -ge 1 ] && break; sleep 0.2; done
restarts=$(docker inspect -f '{{.RestartCount}}' "$victim")
[ "$restarts" -ge 1 ] || fail "replica-2 was not restarted by its restart policy within 30 s"
t_restarted=$(elapsed "$killed_at")
wait_healthy replica-2 120 >/dev/null
t_back=$(elapsed "$killed_at")
back_at="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
wait "$bench_pid" || fail "the bench through nginx failed beyond the requests on the killed replica:" \
  "$(grep -A6 'Failed requests' "$out/crash.log" | head -10)"
# The requests on the killed server may fail; every other succeeds with at most 3 s of extra waiting
# (its time to first token against the run's median).
read -r num_ok num_failed num_cut median_ttft max_ttft num_slow < <(python3 - "$work/crash.json" <<'EOF'
import json, statistics, sys
j = json.load(open(sys.argv[1]))
ok = [t for t, e in zip(j["ttfts"], j["errors"]) if not e]
failed = [e for e in j["errors"] if e]
cut = [e for e in failed if not e.startswith(("connect:", "write:", "read header:", "HTTP "))]
median = statistics.median(ok)
print(len(ok), len(failed), len(cut), f"{median:.2f}", f"{max(ok):.2f}", sum(t > median + 3 for t in ok))
EOF
)
# nginx retries what was refused: only streams that had begun on the killed server may fail.
[ "$num_cut" = "$num_failed" ] || fail "$((num_failed - num_cut)) requests failed before their response began"
[ "$num_slow" = 0 ] || fail "$num_slow requests waited more than 3 s beyond the median time to first token ($median_ttft s)"
spread=""
for r in replica-1 replica-2 replica-3; do spread+="$r $(num_served $r "$run_start") "; done
# Back in the pool: nginx tries it again after fail_timeout (5 s).
sleep 5
bench after-crash "$lb_url" --num-prompts 36 --max-concurrency 9 --input-len 32 --output-len 64 >"$out/after-crash.log" 2>&1 ||
  fail "the bench after the restart failed (see $out/after-crash.log)"
served_after=$(num_served replica-2 "$back_at")
[ "$served_after" -ge 1 ] || fail "replica-2 took no requests after its restart"
report replicas "$num_prompts streams of 480 tokens through nginx at 25/s, replica-2's server killed (-9) at 30 %:" \
  "$num_ok ok, $num_failed failed (streams cut on the killed server); TTFT median $median_ttft s, max $max_ttft s" \
  "(none > median + 3 s); served: ${spread% }; replica-2 restarted by its policy within $t_restarted s," \
  "healthy again $t_back s after the kill, then served $served_after requests; $(elapsed "$stage_start") s"

# ------------------------------------------------------------------------------------------------ drain
# A rolling stop: one replica drains under load; nginx moves its new requests; nothing fails.
stage_start=$(date +%s)
drain_start="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
bench drain-one "$lb_url" "${load[@]}" >"$out/drain-one.log" 2>&1 &
bench_pid=$!
wait_progress "$out/drain-one.log" 30 300
stop_start=$(date +%s)
compose stop replica-1 >>"$out/replicas.log" 2>&1
t_stop=$(elapsed "$stop_start")
kill -0 "$bench_pid" 2>/dev/null || fail "the load ended before replica-1 stopped: nothing was tested"
wait "$bench_pid" || fail "requests failed while replica-1 drained: $(grep -A6 'Failed requests' "$out/drain-one.log" | head -10)"
r1="$(cid replica-1)"
code_r1=$(docker inspect -f '{{.State.ExitCode}}' "$r1")
drain_line="$(docker logs --since "$drain_start" "$r1" 2>&1 | grep -oE '(drained: .*|[0-9]+ request\(s\) still running.*)' | tail -1)"
in_flight="$(docker logs --since "$drain_start" "$r1" 2>&1 | grep -oE '[0-9]+ in flight' | tail -1)"
[ "$code_r1" = 0 ] || fail "replica-1 exited $code_r1 after docker-compose stop"
[[ "$drain_line" == drained:* ]] || fail "replica-1 did not finish its requests: $drain_line"
[ "${in_flight%% *}" -ge 1 ] || fail "replica-1 had no request in flight when it was stopped: nothing was drained"
one_ok=$(report_value "$out/drain-one.log" 'Successful requests')

# Everything under load: nginx stops gracefully (SIGQUIT) and finishes its streams, then the servers; new
# connections are refused, and no request that started is cut.
# Once nginx is gone a connection attempt hangs until the request timeout: 5 s, far above any silence
# within a running stream.
bench drain-all "$lb_url" "${load[@]}" --max-failures $num_prompts --request-timeout 5 >"$out/drain-all.log" 2>&1 &
bench_pid=$!
wait_progress "$out/drain-all.log" 50 300
kill -0 "$bench_pid" 2>/dev/null || fail "the load ended before docker-compose stop: nothing was tested"
stop_start=$(date +%s)
compose stop >>"$out/replicas.log" 2>&1
t_stop_all=$(elapsed "$stop_start")
wait "$bench_pid" || true  # every request may fail once nginx is gone: counted below
codes=""
for s in lb replica-2 replica-3; do
  c=$(docker inspect -f '{{.State.ExitCode}}' "$(cid $s)")
  codes+="$s $c "
  [ "$c" = 0 ] || fail "$s exited $c after docker-compose stop"
done
read -r all_ok all_refused all_cut < <(python3 - "$work/drain-all.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
errors = [e for e in j["errors"] if e]
# Refused before a response began: no connection, or an error status. Anything else (a body cut short, a
# stream without [DONE], an error chunk) is a cut stream.
refused = [e for e in errors if e.startswith(("connect:", "write:", "read header:", "HTTP "))]
print(len(j["errors"]) - len(errors), len(refused), len(errors) - len(refused))
EOF
)
[ "$all_cut" = 0 ] || fail "$all_cut requests were cut by docker-compose stop: $(grep -A6 'Failed requests' "$out/drain-all.log" | head -10)"
report drain "stop replica-1 under load: stopped in $t_stop s, exit 0, $in_flight, $drain_line; $one_ok/$num_prompts" \
  "requests ok. stop everything under load: stopped in $t_stop_all s, exit codes ${codes% }; $all_ok streams" \
  "finished, $all_refused requests refused after the stop, 0 cut; $(elapsed "$stage_start") s"

# ------------------------------------------------------------------------------------------------ cleanup
stage_start=$(date +%s)
for s in server lb replica-1 replica-2 replica-3; do
  c="$(cid $s)"
  [ -z "$c" ] || docker logs "$c" >"$out/container-$s.log" 2>&1 || true
done
compose down --remove-orphans -t 30 >>"$out/replicas.log" 2>&1
left_containers=$(docker ps -aq --filter "label=com.docker.compose.project=$project" | wc -l)
left_networks=$(docker network ls -q --filter "label=com.docker.compose.project=$project" | wc -l)
[ "$left_containers" = 0 ] && [ "$left_networks" = 0 ] ||
  fail "down left $left_containers container(s) and $left_networks network(s)"
report cleanup "down: 0 containers, 0 networks left$([ -n "$started_dockerd_pid" ] && echo "; the dockerd started here (pid $started_dockerd_pid) is stopped on exit"); $(elapsed "$stage_start") s"
report total "$(elapsed "$script_start") s, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
