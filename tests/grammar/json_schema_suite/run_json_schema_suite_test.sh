#!/usr/bin/env bash
# ctest `json_schema_suite`: the official JSON Schema Test Suite (npm json-schema-test-suite, draft 4) judged by
# ajv, against engine/grammar/json_schema.cpp's grammars run through the real matcher. node_modules is cached in
# <work dir> (under the build folder). Exit 77 (ctest: skipped) when node or npm is missing, or the npm registry
# cannot be reached.
# Usage: run_json_schema_suite_test.sh <json_schema_suite_check binary> <work dir>
set -euo pipefail
check="$1"
work="$2"
here="$(cd "$(dirname "$0")" && pwd)"

. "$here/../../npm_workdir.sh"
npm_workdir "$here" "$work" json-schema-test-suite "the JSON Schema Test Suite check"
cp "$here/make_cases.mjs" "$here/extra_cases.mjs" "$here/random_cases.mjs" "$here/validate_samples.mjs" "$work/"
(cd "$work" && node make_cases.mjs "$work/cases.json" "$work/left_out.txt")
status=0
"$check" "$work/cases.json" "$work/samples.json" || status=$?
# Whatever the grammars let a model write must be valid: ajv judges their random completions.
(cd "$work" && node validate_samples.mjs "$work/samples.json") || status=1
exit "$status"
