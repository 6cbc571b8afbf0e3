// Structured output over real vocabularies: random-weight models made with `inflight make-model --tokenizer`
// from the Llama 3, Qwen 3 (byte-level BPE) and Gemma 3 (sentencepiece-style BPE with byte fallback)
// tokenizer.json files are served, and asked for JSON fitting a schema, sampled at temperature 1 over many
// seeds. Every answer that stops must parse and be valid to ajv (the judge: no code of inflight's), and most
// must stop. Usage: node structured_check.mjs <inflight> <work dir>
import { spawnSync } from "node:child_process";
import path from "node:path";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

import { fail, modelsDir, serve } from "./serve_model.mjs";

const [inflight, work] = process.argv.slice(2);

// Bounded strings, arrays and numbers: a model that knows no JSON still has to close what it opens.
const schemas = {
  person: {
    type: "object",
    properties: {
      name: { type: "string", minLength: 1, maxLength: 10 },
      age: { type: "integer", minimum: 0, maximum: 120 },
      born: { type: "string", format: "date" },
    },
    required: ["name", "age"],
    additionalProperties: false,
  },
  choices: {
    type: "object",
    properties: {
      kind: { enum: ["cat", "dog", 3, null, true] },
      version: { const: "v1" },
      score: { type: "number", exclusiveMinimum: -1, maximum: 1 },
    },
    required: ["kind", "version", "score"],
    additionalProperties: false,
  },
  matrix: {
    type: "array",
    items: { type: "array", items: { type: "integer", minimum: -50, maximum: 50 }, minItems: 1, maxItems: 3 },
    minItems: 1,
    maxItems: 3,
  },
  union: {
    type: "object",
    properties: {
      value: { anyOf: [{ type: "boolean" }, { type: "integer", minimum: 10, maximum: 99 }, { type: "string", maxLength: 5 }] },
      when: { type: "string", format: "date" },
      id: { type: "string", format: "uuid" },
    },
    required: ["value", "when", "id"],
    additionalProperties: false,
  },
  refs: {
    $defs: { point: { type: "object", properties: { x: { type: "integer", minimum: 0, maximum: 9 }, y: { type: "integer", minimum: 0, maximum: 9 } }, required: ["x", "y"], additionalProperties: false } },
    type: "object",
    properties: { from: { $ref: "#/$defs/point" }, to: { $ref: "#/$defs/point" }, tag: { type: "string", pattern: "^[a-z]{2,4}-[0-9]$" } },
    required: ["from", "to", "tag"],
    additionalProperties: false,
  },
  tuple: {
    type: "array",
    prefixItems: [{ type: "string", maxLength: 4 }, { type: "integer", minimum: 0, maximum: 5 }, { type: "boolean" }],
    items: false,
  },
};

const ajv = new Ajv2020({ strict: false });
addFormats(ajv);
// INFLIGHT_STRUCTURED_SEEDS: fewer seeds where the server is slow (scripts/sanitize.sh sets 2 under ASan).
const seeds = Number(process.env.INFLIGHT_STRUCTURED_SEEDS ?? 8);
for (const name of ["llama3", "qwen3", "gemma3"]) {
  // Gemma 3's pre-tokenizer has no GGUF name: a Hugging Face folder.
  const format = name === "gemma3" ? "hf" : "gguf";
  const out = path.join(work, `structured-${name}${format === "gguf" ? ".gguf" : ""}`);
  const made = spawnSync(inflight, ["make-model", "--preset", "tiny", "--layers", "1", "--dtype", "f16",
                                    "--tokenizer", modelsDir(name), "--format", format, "-o", out], { encoding: "utf8" });
  if (made.status !== 0) {
    fail(`make-model ${name}: ${made.stdout}${made.stderr}`);
    continue;
  }
  const server = await serve(inflight, out);
  try {
    const base = `http://127.0.0.1:${server.port}`;
    for (const [schemaName, schema] of Object.entries(schemas)) {
      const validate = ajv.compile(schema);
      let stopped = 0;
      for (let seed = 0; seed < seeds; seed++) {
        const res = await fetch(`${base}/v1/completions`, {
          method: "POST", headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ prompt: "Here is the data:", max_tokens: 160, temperature: 1, seed,
                                 response_format: { type: "json_schema", json_schema: { name: schemaName, schema } } }),
        });
        const body = await res.json();
        if (res.status !== 200) {
          fail(`${name} ${schemaName} seed ${seed}: HTTP ${res.status} ${JSON.stringify(body)}`);
          continue;
        }
        const choice = body.choices[0];
        if (choice.finish_reason !== "stop") continue;
        stopped++;
        let value;
        try {
          value = JSON.parse(choice.text);
        } catch (e) {
          fail(`${name} ${schemaName} seed ${seed}: not JSON: ${JSON.stringify(choice.text)}`);
          continue;
        }
        if (!validate(value))
          fail(`${name} ${schemaName} seed ${seed}: ${JSON.stringify(choice.text)} invalid: ${JSON.stringify(validate.errors)}`);
      }
      if (stopped < seeds * 3 / 4) fail(`${name} ${schemaName}: only ${stopped} of ${seeds} answers stopped`);
      console.log(`${name} ${schemaName}: ${stopped} of ${seeds} answers stopped, all valid to ajv`);
    }
  } catch (e) {
    fail(`${name}: ${e.stack}\n${server.log()}`);
  } finally {
    server.child.kill("SIGTERM");
  }
}
