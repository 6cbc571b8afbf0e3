#!/usr/bin/python3
"""Checks docker/ without a Docker engine (none runs on these machines).

  compose-config  docker-compose validates docker/docker-compose.yml, with each profile and with the CUDA image
  consistency     every path the Dockerfiles and the compose file COPY or mount exists and survives .dockerignore;
                  every port agrees with the server's default; every INFLIGHT_* variable the compose file sets is
                  mapped by docker/entrypoint.sh to a real `inflight serve` flag (and every flag has one); the
                  images install and build with the same scripts as CI (the build stage: --build-only, the
                  inflight target); the runtime stage installs the packages of every shared library the binary
                  links; the servers run non-root on a read-only root with a tmpfs, limits from variables, a
                  start_period, and a stop_grace_period above the server's shutdown grace; nginx's connect
                  timeout, max_fails and retries; the CUDA base images are ARGs; CI runs scripts/docker-e2e.sh
  entrypoint      docker/entrypoint.sh starts the real server from INFLIGHT_* variables, docker/healthcheck.sh
                  tells ready from not, and `entrypoint.sh bench` runs the load-test client against it

Usage: check_docker.py MODE --inflight BUILD/inflight [--model stories260K.gguf]
Runs with Debian's /usr/bin/python3: PyYAML comes with the docker-compose package (scripts/install-deps.sh).
"""
import argparse
import fnmatch
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DOCKER = os.path.join(ROOT, "docker")
COMPOSE = os.path.join(DOCKER, "docker-compose.yml")
DOCKERFILES = ["docker/Dockerfile", "docker/Dockerfile.cuda"]

failures = []
num_passed = 0


def check(ok, what):
    global num_passed
    if ok:
        num_passed += 1
        print(f"ok: {what}")
    else:
        failures.append(what)
        print(f"FAIL: {what}")


def read(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


# ---------------------------------------------------------------------------------------------- parsing


def dockerfile_instructions(path):
    """[(INSTRUCTION, arguments)] with line continuations joined and comments dropped."""
    out, pending = [], ""
    for line in read(path).splitlines():
        if not pending and line.lstrip().startswith("#"):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        line = (pending + line).strip()
        pending = ""
        if line:
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def stages(instructions):
    """The instructions split at each FROM; the last stage is the runtime image."""
    out = []
    for ins in instructions:
        if ins[0] == "FROM":
            out.append([])
        if out:
            out[-1].append(ins)
    return out


def copy_sources(instructions):
    """(sources, destination) of each COPY that reads the build context (not --from=)."""
    out = []
    for word, rest in instructions:
        if word != "COPY":
            continue
        parts = shlex.split(rest)
        if any(p.startswith("--from") for p in parts):
            out.append(([], parts[-1], True))
            continue
        parts = [p for p in parts if not p.startswith("--")]
        out.append((parts[:-1], parts[-1], False))
    return out


def env_of(instructions):
    env = {}
    for word, rest in instructions:
        if word == "ENV":
            for key, value in re.findall(r"(\w+)=(\S+)", rest):
                env[key] = value
    return env


def default_of(value):
    """`${VAR:-default}` -> default, recursively; other text as is."""
    return re.sub(r"\$\{\w+:?-([^}]*)\}", lambda m: m.group(1), str(value))


def load_compose():
    import yaml  # Debian's python3-yaml, a dependency of docker-compose

    with open(COMPOSE) as f:
        return yaml.safe_load(f)


def server_services(compose):
    """The services that run `inflight serve`: they carry the INFLIGHT_* environment."""
    return {n: s for n, s in compose["services"].items() if "INFLIGHT_PORT" in (s.get("environment") or {})}


def entrypoint_map():
    """INFLIGHT_* variable -> flag, from FLAG_OF_VARIABLE in docker/entrypoint.sh."""
    text = read("docker/entrypoint.sh")
    block = re.search(r"FLAG_OF_VARIABLE=\((.*?)\)", text, re.S).group(1)
    return dict(re.findall(r"(INFLIGHT_\w+)=(--[\w-]+)", block))


def serve_help(inflight):
    return subprocess.run([inflight, "serve", "--help"], capture_output=True, text=True, check=True).stdout


def serve_flags(help_text):
    return set(re.findall(r"(?:^|[ ,])(--[a-z][a-z0-9-]*)", help_text, re.M)) - {"--help"}


def default_port(help_text):
    line = next(l for l in help_text.splitlines() if "--port" in l)
    return int(re.search(r"(?:=|default )(\d+)", line).group(1))  # CLI11 prints the default as --port INT=8000


def default_shutdown_grace(help_text):
    entry = help_text[help_text.index("--shutdown-grace-seconds"):].split("\n  --", 1)[0]  # may wrap
    return float(re.search(r"(?:=|default )(\d+(?:\.\d+)?)", entry).group(1))


def seconds_of(duration):
    """A compose duration ("30s", "1m30s", "600s") in seconds."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", str(duration))
    return sum(float(n) * units[u] for n, u in parts)


# ---------------------------------------------------------------------------------------------- modes


def compose_config():
    base = ["docker-compose", "-f", COMPOSE]
    variants = [
        ("no profile", [], {}),
        ("profile bench", ["--profile", "bench"], {}),
        ("profile replicas", ["--profile", "replicas"], {}),
        ("every profile, CUDA image", ["--profile", "bench", "--profile", "replicas"],
         {"INFLIGHT_DOCKERFILE": "docker/Dockerfile.cuda", "INFLIGHT_IMAGE": "inflight:cuda"}),
    ]
    try:
        subprocess.run(["docker-compose", "version"], capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        check(False, "docker-compose is installed (scripts/install-deps.sh installs it)")
        return
    for name, flags, env in variants:
        r = subprocess.run(base + flags + ["config"], capture_output=True, text=True, cwd=ROOT,
                           env={**os.environ, **env})
        check(r.returncode == 0, f"docker-compose config ({name})" + ("" if r.returncode == 0 else ":\n" + r.stderr))
        if r.returncode == 0:
            services = r.stdout.split("\nservices:\n", 1)[-1]
            expected = {"no profile": ["server"], "profile bench": ["server", "bench"],
                        "profile replicas": ["server", "replica-1", "replica-2", "replica-3", "lb"]}.get(name, [])
            for service in expected:
                check(re.search(rf"^  {re.escape(service)}:$", services, re.M) is not None,
                      f"docker-compose config ({name}) lists service {service}")


def consistency(inflight):
    compose = load_compose()
    help_text = serve_help(inflight)
    flags = serve_flags(help_text)
    port = default_port(help_text)

    # Paths: build contexts, Dockerfiles, COPY sources, mounts.
    ignore = [l.strip() for l in read(".dockerignore").splitlines() if l.strip() and not l.startswith("#")]
    for name, service in compose["services"].items():
        build = service.get("build")
        if not build:
            continue
        context = os.path.normpath(os.path.join(DOCKER, default_of(build["context"])))
        check(context == ROOT, f"compose {name}: the build context is the repository root")
        check(os.path.isfile(os.path.join(context, default_of(build["dockerfile"]))),
              f"compose {name}: dockerfile {default_of(build['dockerfile'])} exists")
    for dockerfile in DOCKERFILES:
        ins = dockerfile_instructions(dockerfile)
        copied_to = set()
        for sources, dest, from_stage in copy_sources(ins):
            copied_to.add(dest)
            for src in sources:
                check(os.path.exists(os.path.join(ROOT, src)), f"{dockerfile}: COPY {src} exists")
                hidden = [p for p in ignore if src != "." and
                          (fnmatch.fnmatch(src, p.rstrip("/")) or fnmatch.fnmatch(src, p.rstrip("/") + "/*"))]
                check(not hidden, f"{dockerfile}: COPY {src} is not excluded by .dockerignore {hidden}")
                if src.endswith(".sh"):
                    check(os.access(os.path.join(ROOT, src), os.X_OK), f"{dockerfile}: {src} is executable")
        runtime = stages(ins)[-1]
        for word, rest in runtime:
            if word in ("ENTRYPOINT", "HEALTHCHECK"):
                program = json.loads(rest[rest.index("["):])[0]
                check(any(d.endswith("/" + program) for d in copied_to),
                      f"{dockerfile}: {word} runs {program}, which the image COPYs")
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            host = default_of(volume).split(":")[0]
            check(os.path.exists(os.path.join(DOCKER, host)), f"compose {name}: mount source {host} exists")
        test = (service.get("healthcheck") or {}).get("test")
        if test:
            check(test[1] == "inflight-healthcheck" and os.path.exists(os.path.join(DOCKER, "healthcheck.sh")),
                  f"compose {name}: healthcheck runs the image's inflight-healthcheck")

    # Ports: the server's default everywhere a container listens or is reached.
    check(json.loads(read("configs/server.json"))["port"] == port,
          f"configs/server.json port equals `inflight serve --help`'s default {port}")
    for dockerfile in DOCKERFILES:
        ins = dockerfile_instructions(dockerfile)
        runtime = stages(ins)[-1]
        exposed = [int(p.split("/")[0]) for w, r in runtime if w == "EXPOSE" for p in r.split()]
        check(exposed == [port], f"{dockerfile}: EXPOSE {exposed} is the server's default {port}")
        check(env_of(runtime).get("INFLIGHT_PORT") == str(port), f"{dockerfile}: ENV INFLIGHT_PORT={port}")
        check(env_of(runtime).get("INFLIGHT_HOST") == "0.0.0.0", f"{dockerfile}: ENV INFLIGHT_HOST=0.0.0.0")
    check(f"${{INFLIGHT_PORT:-{port}}}" in read("docker/healthcheck.sh"),
          f"docker/healthcheck.sh defaults to port {port}")
    servers = server_services(compose)
    check({"server", "replica-1", "replica-2", "replica-3"} <= set(servers), "compose: server and 3 replicas")
    for name, service in servers.items():
        check(str(service["environment"]["INFLIGHT_PORT"]) == str(port), f"compose {name}: INFLIGHT_PORT={port}")
        for mapping in service.get("ports", []):
            check(int(default_of(mapping).split(":")[-1]) == port, f"compose {name}: publishes container port {port}")
    nginx = read("docker/nginx.conf")
    upstreams = re.findall(r"^\s*server\s+([\w.-]+):(\d+)", nginx, re.M)
    replicas = sorted(n for n, s in servers.items() if "replicas" in s.get("profiles", []))
    check(sorted(h for h, _ in upstreams) == replicas, f"nginx upstreams {upstreams} are the replica services {replicas}")
    check(all(int(p) == port for _, p in upstreams), f"nginx reaches every replica on port {port}")
    check(re.search(r"^\s*least_conn;", nginx, re.M) is not None, "nginx balances by least connections")
    check(re.search(r"^\s*proxy_buffering off;", nginx, re.M) is not None, "nginx streams SSE unbuffered")
    listen = int(re.search(r"^\s*listen\s+(\d+);", nginx, re.M).group(1))
    lb_ports = [int(default_of(m).split(":")[-1]) for m in compose["services"]["lb"].get("ports", [])]
    check(lb_ports == [listen], f"compose lb publishes nginx's listen port {listen}")
    check("./nginx.conf:/etc/nginx/nginx.conf:ro" in compose["services"]["lb"].get("volumes", []),
          "compose lb mounts docker/nginx.conf as nginx's configuration")
    bench = compose["services"]["bench"]
    command = [default_of(c) for c in bench["command"]]
    check(command[0] == "bench", "compose bench runs `inflight bench` through the entrypoint")
    url = command[command.index("--base-url") + 1]
    m = re.match(r"http://([\w.-]+):(\d+)", url)
    check(m is not None and m.group(1) in servers and int(m.group(2)) == port,
          f"compose bench targets a server service on port {port} ({url})")
    check("server" in bench.get("depends_on", {}), "compose bench waits for the server")
    bench_help = subprocess.run([inflight, "bench", "--help"], capture_output=True, text=True, check=True).stdout
    for arg in command[1:]:
        if arg.startswith("--"):
            check(arg in serve_flags(bench_help), f"compose bench: `inflight bench` has flag {arg}")

    # Variables -> entrypoint -> flags.
    flag_of = entrypoint_map()
    for name, service in servers.items():
        for variable in service["environment"]:
            check(variable in flag_of, f"compose {name}: {variable} is handled by docker/entrypoint.sh")
    for variable, flag in sorted(flag_of.items()):
        check(flag in flags, f"entrypoint {variable} -> {flag} is an `inflight serve` flag")
        expected = "INFLIGHT_" + flag[2:].upper().replace("-", "_")
        check(variable == expected, f"entrypoint {variable} is named after {flag}")
    for name, service in servers.items():
        missing = sorted(set(flag_of) - set(service["environment"]))
        check(not missing, f"compose {name} passes every entrypoint variable through (missing: {missing})")
    unmapped = sorted(flags - set(flag_of.values()))
    check(not unmapped, f"every `inflight serve` flag has an INFLIGHT_* variable (missing: {unmapped})")
    for flag in ["--model", "--host", "--port", "--served-model-name", "--api-key", "--max-num-seqs",
                 "--max-num-batched-tokens", "--max-model-len", "--kv-cache-dtype", "--kv-cache-memory",
                 "--kv-block-size", "--threads", "--max-queue", "--log-level"]:
        check(flag in flags, f"`inflight serve` has {flag}")

    # Operators' expectations: non-root, read-only root with scratch space, limits and health timings from
    # variables, a drain that fits in the stop grace period.
    grace = default_shutdown_grace(help_text)
    for name, service in servers.items():
        user = str(service.get("user", ""))
        check(user != "" and user.split(":")[0] not in ("0", "root"), f"compose {name}: runs as a non-root user ({user!r})")
        check(service.get("read_only") is True, f"compose {name}: read-only root filesystem")
        check(any(str(t).split(":")[0] == "/tmp" for t in service.get("tmpfs", [])), f"compose {name}: a tmpfs on /tmp")
        check(str(service.get("mem_limit", "")).startswith("${INFLIGHT_MEMORY_LIMIT"),
              f"compose {name}: memory limit from INFLIGHT_MEMORY_LIMIT")
        check(str(service.get("cpus", "")).startswith("${INFLIGHT_CPUS"), f"compose {name}: CPU limit from INFLIGHT_CPUS")
        health = service.get("healthcheck") or {}
        check(seconds_of(default_of(health.get("start_period", ""))) >= 300,
              f"compose {name}: healthcheck start_period of at least 5 minutes for a large model's load")
        stop_grace = seconds_of(service.get("stop_grace_period", "10s"))
        check(stop_grace > grace, f"compose {name}: stop_grace_period {stop_grace:g} s exceeds the server's "
                                  f"shutdown grace {grace:g} s, so a stop drains before docker kills")
        check(service.get("stop_signal", "SIGTERM") == "SIGTERM", f"compose {name}: stops with SIGTERM (the drain)")
    lb = compose["services"]["lb"]
    check(str(lb.get("image", "")).startswith("${INFLIGHT_LB_IMAGE:-"), "compose lb: the image is ${INFLIGHT_LB_IMAGE}")
    check(lb.get("stop_signal") == "SIGQUIT", "compose lb: stops with SIGQUIT (nginx's graceful stop)")
    check(read("docker/entrypoint.sh").count("INFLIGHT_SHUTDOWN_GRACE_SECONDS=--shutdown-grace-seconds") == 1,
          "entrypoint maps INFLIGHT_SHUTDOWN_GRACE_SECONDS")
    timeout = re.search(r"^\s*proxy_connect_timeout\s+(\d+)s;", nginx, re.M)
    check(timeout is not None and int(timeout.group(1)) <= 3, "nginx gives up connecting to a dead replica within 3 s")
    check(all(re.search(rf"^\s*server\s+{h}:{p}\s.*max_fails=\d+.*fail_timeout=\d+s;", nginx, re.M) for h, p in upstreams),
          "nginx: every upstream has max_fails and fail_timeout")
    retry = re.search(r"^\s*proxy_next_upstream\s+([^;]+);", nginx, re.M)
    retried = set(retry.group(1).split()) if retry else set()
    check({"error", "timeout", "http_503", "non_idempotent"} <= retried,
          f"nginx retries a failed connection or a 503 (drain) on another replica, POSTs included ({sorted(retried)})")

    # CI parity: the same install and build scripts.
    ci = read(".ci/run")
    check("scripts/install-deps.sh" in ci and "scripts/test.sh" in ci, ".ci/run runs install-deps.sh and test.sh")
    check("bash scripts/docker-e2e.sh" in ci and ci.index("bash scripts/docker-e2e.sh") > ci.index("bash scripts/test.sh"),
          ".ci/run runs scripts/docker-e2e.sh after the tests")
    check(os.access(os.path.join(ROOT, "scripts/docker-e2e.sh"), os.X_OK), "scripts/docker-e2e.sh is executable")
    check("scripts/build.sh" in read("scripts/test.sh"), "scripts/test.sh builds with scripts/build.sh")
    check(re.search(r"^\s*docker-compose\b", read("scripts/install-deps.sh"), re.M) is not None,
          "scripts/install-deps.sh installs docker-compose")
    for dockerfile in DOCKERFILES:
        build_stage = stages(dockerfile_instructions(dockerfile))[0]
        runs = " ".join(r for w, r in build_stage if w == "RUN")
        check("bash scripts/install-deps.sh --build-only" in runs,
              f"{dockerfile}: the build stage runs scripts/install-deps.sh --build-only")
        check("INFLIGHT_BUILD_TARGET=inflight bash scripts/build.sh" in runs,
              f"{dockerfile}: the build stage builds the inflight target with scripts/build.sh")
    cuda_froms = [r.split()[0] for w, r in dockerfile_instructions("docker/Dockerfile.cuda") if w == "FROM"]
    check(all(f.startswith("${") for f in cuda_froms), f"docker/Dockerfile.cuda takes its base images as ARGs ({cuda_froms})")
    cpu_from = stages(dockerfile_instructions("docker/Dockerfile"))[0][0][1]
    if os.path.exists("/etc/debian_version"):
        major = read_abs("/etc/debian_version").split(".")[0]
        check(cpu_from.startswith(f"debian:{major} "), f"docker/Dockerfile builds on CI's Debian {major} ({cpu_from})")
    check(" -DINFLIGHT_CUDA=ON" in " ".join(r for w, r in stages(dockerfile_instructions("docker/Dockerfile.cuda"))[0]),
          "docker/Dockerfile.cuda builds the CUDA backend")

    # The runtime stage installs the package of every shared library the binary links.
    runtime = stages(dockerfile_instructions("docker/Dockerfile"))[-1]
    installed = set()
    for w, r in runtime:
        if w == "RUN" and "apt-get install" in r:
            installed |= set(re.findall(r"\b(lib[\w.+-]+)", r.split("apt-get install", 1)[1].split("&&")[0]))
    # NOTE: a sanitizer build (scripts/sanitize.sh) links the sanitizer runtimes; a release image never does.
    # A build with CUDA links cuBLAS; docker/Dockerfile builds without it, and Dockerfile.cuda's runtime base
    # image brings the CUDA libraries.
    base = re.compile(r"/(libc|libm|libgcc_s|libstdc\+\+|libpthread|libdl|librt|ld-linux[\w.-]*|"
                      r"libasan|libubsan|libtsan|liblsan|libcublas|libcublasLt|libcudart)\.so")
    ldd = subprocess.run(["ldd", inflight], capture_output=True, text=True, check=True).stdout
    for lib in re.findall(r"=> (/\S+)", ldd):
        if base.search(lib):
            continue
        owner = subprocess.run(["dpkg", "-S", os.path.realpath(lib)], capture_output=True, text=True)
        package = owner.stdout.split(":")[0] if owner.returncode == 0 else "?"
        check(package in installed, f"docker/Dockerfile runtime installs {package} for {os.path.basename(lib)}")


def read_abs(path):
    with open(path) as f:
        return f.read()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthcheck(port):
    env = {**os.environ, "INFLIGHT_PORT": str(port)}
    return subprocess.run([os.path.join(DOCKER, "healthcheck.sh")], env=env, capture_output=True).returncode


def entrypoint(inflight, model):
    script = os.path.join(DOCKER, "entrypoint.sh")
    # The mapping itself: set variables become flags in order, empty ones vanish, arguments come last.
    env = {**os.environ, "INFLIGHT_BIN": "echo", "INFLIGHT_MODEL": "/models/m.gguf", "INFLIGHT_API_KEY": "",
           "INFLIGHT_PORT": "9000", "INFLIGHT_KV_CACHE_MEMORY": "1G"}
    out = subprocess.run([script, "--log-level", "debug"], env=env, capture_output=True, text=True).stdout.strip()
    check(out == "serve --model /models/m.gguf --port 9000 --kv-cache-memory 1G --log-level debug",
          f"entrypoint maps variables to flags: {out!r}")
    out = subprocess.run([script, "bench", "--num-prompts", "3"], env=env, capture_output=True, text=True).stdout.strip()
    check(out == "bench --num-prompts 3", f"entrypoint runs another command as given: {out!r}")

    port = free_port()
    check(healthcheck(port) != 0, "healthcheck fails when no server listens")
    env = {**os.environ, "INFLIGHT_BIN": inflight, "INFLIGHT_MODEL": model, "INFLIGHT_HOST": "127.0.0.1",
           "INFLIGHT_PORT": str(port), "INFLIGHT_SERVED_MODEL_NAME": "from-env", "INFLIGHT_KV_CACHE_MEMORY": "64M",
           "INFLIGHT_MAX_NUM_SEQS": "8", "INFLIGHT_THREADS": "1", "INFLIGHT_LOG_LEVEL": "info",
           "INFLIGHT_SHUTDOWN_GRACE_SECONDS": "7"}
    server = subprocess.Popen([script], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 120
        while healthcheck(port) != 0 and server.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        check(healthcheck(port) == 0, "healthcheck passes once the server started by the entrypoint is ready")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as r:
            models = json.load(r)
        check(models["data"][0]["id"] == "from-env", "INFLIGHT_SERVED_MODEL_NAME reached the server")
        bench = subprocess.run([script, "bench", "--base-url", f"http://127.0.0.1:{port}", "--num-prompts", "4",
                                "--max-concurrency", "2", "--input-len", "8", "--output-len", "4", "--no-progress"],
                               env={**os.environ, "INFLIGHT_BIN": inflight}, capture_output=True, text=True, timeout=120)
        check(bench.returncode == 0 and re.search(r"Successful requests: +4 ", bench.stdout) is not None,
              "`entrypoint.sh bench` load-tests the server" + ("" if bench.returncode == 0 else ":\n" + bench.stderr))
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            code = server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            code = server.wait()
        log = server.stdout.read()
    check(code == 0, f"the server exits 0 on SIGTERM (exit {code})" + ("" if code == 0 else ":\n" + log[-3000:]))
    check("get up to 7 s to finish" in log, "INFLIGHT_SHUTDOWN_GRACE_SECONDS reached the server's drain")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["compose-config", "consistency", "entrypoint"])
    parser.add_argument("--inflight", required=True, help="the built inflight binary")
    parser.add_argument("--model", help="a GGUF model for the entrypoint check")
    args = parser.parse_args()
    if args.mode == "compose-config":
        compose_config()
    elif args.mode == "consistency":
        consistency(args.inflight)
    else:
        entrypoint(args.inflight, args.model)
    print(f"{num_passed} passed, {len(failures)} failed")
    for f in failures:
        print(f"  failed: {f.splitlines()[0]}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
