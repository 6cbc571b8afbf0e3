// inflight's tokenizers against transformers.js (@lenml/tokenizers) over corpus.json, for the real
// tokenizer.json / tokenizer_config.json of each @lenml/tokenizer-* package: the same ids (special tokens
// added as the tokenizer configures) and the same decoded text (special tokens skipped).
// inflight runs as `inflight tokenize --tokenizer <dir>` (JSON lines).
// Lone surrogates: UTF-8 cannot carry one, so a client's text reaches a server with U+FFFD in its place
// (TextEncoder, toWellFormed); a JSON body with a "\ud800" escape is refused as invalid. Both sides get the
// corpus string as a UTF-8 client sends it. (transformers.js alone would byte-fall-back a raw lone
// surrogate to the bytes of U+FFFD, unlike U+FFFD itself, an artifact of JS strings.)
// Llama 3 and Qwen 3 are checked a second time through a GGUF file made with `inflight make-model --tokenizer
// --format gguf` (the vocabulary as tokenizer.ggml.model = gpt2).
// Usage: node tokenizers_check.mjs <inflight> <corpus.json> [name...]
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { TokenizerLoader } from "@lenml/tokenizers";

const [inflight, corpusPath, ...only] = process.argv.slice(2);
const corpus = JSON.parse(readFileSync(corpusPath, "utf8"));
const require = createRequire(import.meta.url);
const names = only.length ? only : ["llama3", "qwen3", "gemma3", "llama2"];

function modelsDir(name) {
  return path.dirname(require.resolve(`@lenml/tokenizer-${name}/models/tokenizer.json`));
}

function runInflight(dir, requests) {
  const input = requests.map((r) => JSON.stringify(r)).join("\n") + "\n";
  const r = spawnSync(inflight, ["tokenize", "--tokenizer", dir], { input, maxBuffer: 1 << 28, encoding: "utf8" });
  if (r.status !== 0) throw new Error(`inflight tokenize exited ${r.status}: ${r.stderr}`);
  return r.stdout.trim().split("\n").map((l) => JSON.parse(l));
}

const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
// A small random model with the tokenizer's vocabulary as GGUF gpt2; its path.
function makeGguf(name, dir) {
  const out = path.resolve(`vocab-${name}.gguf`);
  const r = spawnSync(inflight, ["make-model", "--preset", "tiny", "--layers", "1", "--dim", "32", "--heads", "2",
                                 "--kv-heads", "1", "--ffn", "32", "--dtype", "f16", "--tokenizer", dir,
                                 "--format", "gguf", "-o", out], { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`make-model --format gguf exited ${r.status}: ${r.stdout}${r.stderr}`);
  return out;
}

let failures = 0;
const runs = [];
for (const name of names) {
  runs.push({ name });
  if (name === "llama3" || name === "qwen3") runs.push({ name, label: `${name} (GGUF gpt2)`, gguf: true });
}
for (const run of runs) {
  const name = run.name;
  const dir = modelsDir(name);
  const label = run.label ?? name;
  const tokenizer = TokenizerLoader.fromPreTrained({
    tokenizerJSON: JSON.parse(readFileSync(path.join(dir, "tokenizer.json"), "utf8")),
    tokenizerConfig: JSON.parse(readFileSync(path.join(dir, "tokenizer_config.json"), "utf8")),
  });
  const t0 = Date.now();
  const texts = corpus.map((s) => s.toWellFormed());
  const answers = runInflight(run.gguf ? makeGguf(name, dir) : dir, texts.map((s) => ({ text: s, add_special_tokens: true })));
  const seconds = (Date.now() - t0) / 1000;
  let ok = 0;
  const bad = [];
  texts.forEach((s, i) => {
    const jsIds = Array.from(tokenizer.encode(s));
    // clean_up_tokenization_spaces off: a lossy English-only rewrite (" ." -> ".") that servers do not apply.
    const jsText = jsIds.length
      ? tokenizer.decode(jsIds, { skip_special_tokens: true, clean_up_tokenization_spaces: false })
      : "";
    const got = answers[i];
    if (got.error) bad.push(`#${i} ${JSON.stringify(s)}: inflight error ${got.error}`);
    else if (!same(got.ids, jsIds))
      bad.push(`#${i} ${JSON.stringify(s)}:\n    ids  js      ${JSON.stringify(jsIds)}\n    ids  inflight ${JSON.stringify(got.ids)}`);
    else if (got.text !== jsText)
      bad.push(`#${i} ${JSON.stringify(s)}:\n    text js      ${JSON.stringify(jsText)}\n    text inflight ${JSON.stringify(got.text)}`);
    else ok++;
  });
  console.log(`${label}: ${ok}/${corpus.length} strings give the same ids and text (inflight ${seconds.toFixed(1)} s incl. load)`);
  for (const b of bad.slice(0, 12)) console.log("  " + b);
  if (bad.length > 12) console.log(`  ... and ${bad.length - 12} more`);
  failures += bad.length;
}
process.exit(failures ? 1 : 0);
