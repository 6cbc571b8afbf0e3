// The other direction of the check: texts the grammars produced (json_schema_suite_check's random walks through
// fill_mask) must all be JSON that ajv finds valid against their schema. A text that does not parse, or that ajv
// rejects, is a grammar that lets a model write what the schema forbids.
//   node validate_samples.mjs <samples.json>
import fs from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const AjvDraft4 = require('ajv-draft-04');
const Ajv2020 = require('ajv/dist/2020');
const addFormats = require('ajv-formats');

// Whether a JSON text (already known to parse) repeats a key within one object. A grammar cannot compare keys,
// so it lets additional keys repeat; JSON.parse keeps the last, and minProperties then counts fewer members than
// were written. Such texts are counted apart (checked to be JSON only).
function hasDuplicateKeys(text) {
  let i = 0;
  const ws = () => { while (i < text.length && ' \t\n\r'.includes(text[i])) i++; };
  const str = () => {
    const start = i++;
    while (text[i] !== '"') i += text[i] === '\\' ? 2 : 1;
    i++;
    return JSON.parse(text.slice(start, i));
  };
  const value = () => {
    ws();
    let dup = false;
    if (text[i] === '{' || text[i] === '[') {
      const object = text[i++] === '{';
      const keys = new Set();
      ws();
      if (text[i] === '}' || text[i] === ']') { i++; return false; }
      for (;;) {
        if (object) {
          ws();
          const k = str();
          if (keys.has(k)) dup = true;
          keys.add(k);
          ws();
          i++;  // ':'
        }
        if (value()) dup = true;
        ws();
        if (text[i++] !== ',') return dup;
      }
    }
    if (text[i] === '"') { str(); return false; }
    while (i < text.length && !',]} \t\n\r'.includes(text[i])) i++;
    return false;
  };
  return value();
}

// Whether a JSON text holds a number with more than 15 significant digits: JSON.parse rounds it to a double, and
// ajv's verdict is then about another number (12345678901234567.5 is an integer to it, and a multiple of 2).
function hasImpreciseNumber(text) {
  const outside = text.replace(/"(?:[^"\\]|\\.)*"/g, '""');  // strings out
  for (const token of outside.match(/-?[0-9][0-9.]*(?:[eE][-+]?[0-9]+)?/g) || []) {
    const mantissa = token.replace(/^-/, '').split(/[eE]/)[0].replace('.', '').replace(/^0+/, '');
    if (mantissa.replace(/0+$/, '').length > 15) return true;
  }
  return false;
}

const samples = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const draft4 = new AjvDraft4({ strict: false, validateSchema: false });
const draft2020 = new Ajv2020({ strict: false, validateSchema: false });
addFormats(draft4);
addFormats(draft2020);
const validators = new Map();
let valid = 0, invalid = 0, beyondDoubles = 0, duplicateKeys = 0;
for (const { group, schema, text } of samples) {
  if (!validators.has(group)) {
    // The suite's own files are draft 4; extra_cases.mjs and random_cases.mjs are 2020-12.
    const ajv = /^(extra|random)_cases\.mjs:/.test(group) ? draft2020 : draft4;
    validators.set(group, ajv.compile(schema));
  }
  // NOTE: ajv works in doubles; a number past 15 significant digits loses its exact value in JSON.parse, so the
  // verdict would be about a different number. Such texts are only checked to be JSON.
  if (hasImpreciseNumber(text)) {
    try {
      JSON.parse(text);
      beyondDoubles++;
      continue;
    } catch (e) {
      // not JSON: judged below as invalid
    }
  }
  try {
    if (hasDuplicateKeys(text)) {
      duplicateKeys++;
      continue;
    }
  } catch (e) {
    // not JSON: judged below as invalid
  }
  let value, ok = false;
  try {
    value = JSON.parse(text);
    ok = validators.get(group)(value);
  } catch (e) {
    ok = false;
  }
  if (ok) {
    valid++;
  } else {
    invalid++;
    console.log(`INVALID ${group}: ${text}`);
  }
}
console.log(`random completions: ${valid} valid, ${invalid} invalid; checked as JSON only: ${beyondDoubles} with a number past 15 significant digits, ${duplicateKeys} with a repeated key`);
process.exit(invalid === 0 ? 0 : 1);
