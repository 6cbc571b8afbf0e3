# Sourced by the ctest scripts that run a Node.js check (openai_client, webui, chat_templates, tokenizers):
#   npm_workdir <package folder> <work dir> <a module the install must hold> <what the check is>
# Makes sure node and npm exist and <work dir>/node_modules holds the folder's package.json dependencies
# (installed once, again only when package.json changes). Exits 77 (ctest: skipped) with the reason when node
# or npm is missing or the npm registry cannot be reached.
npm_workdir() {
  local here="$1" work="$2" module="$3" what="$4"
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "SKIPPED: node and npm are needed for $what (scripts/install-deps.sh installs them)"
    exit 77
  fi
  mkdir -p "$work"
  if ! cmp -s "$here/package.json" "$work/package.json" || [ ! -d "$work/node_modules/$module" ]; then
    cp "$here/package.json" "$work/package.json"
    # PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD: playwright-core fetches no browser; the web page test drives Debian's.
    if ! (cd "$work" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --no-audit --no-fund --loglevel=error); then
      echo "SKIPPED: npm install failed (is the npm registry reachable?)"
      exit 77
    fi
  fi
}
