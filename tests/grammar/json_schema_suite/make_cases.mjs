// Writes the cases of the official JSON Schema Test Suite (npm json-schema-test-suite: draft 4, the newest draft
// the package carries) that the grammar compiler can take, each judged by ajv (draft-04 class, ajv-formats).
//   node make_cases.mjs <out.json> <left_out.txt>
// Kept: every test group whose schema uses only the keywords of the table in engine/grammar/json_schema.h (the
// list below). Each instance is written as the engine writes JSON: compact (JSON.stringify), object keys in the
// schema's `properties` order (the grammar requires it; see README.md). ajv's verdict on that text is the
// expected answer; where it differs from the suite's `valid`, ajv wins and the disagreement is counted.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const Ajv = require('ajv-draft-04');
const addFormats = require('ajv-formats');

const [outPath, leftOutPath] = process.argv.slice(2);
const Ajv2020 = require('ajv/dist/2020');
const { default: extraGroups } = await import('./extra_cases.mjs');
const { default: randomGroups } = await import('./random_cases.mjs');
const suiteDir = path.join(path.dirname(require.resolve('json-schema-test-suite/package.json')), 'tests', 'draft4');

// engine/grammar/json_schema.h's table: supported keywords, annotations, and the containers of definitions.
const SUPPORTED = new Set(['type', 'enum', 'const', '$ref', 'allOf', 'anyOf', 'oneOf', 'properties', 'required',
  'additionalProperties', 'items', 'prefixItems', 'additionalItems', 'minItems', 'maxItems', 'uniqueItems',
  'minLength', 'maxLength', 'pattern', 'format', 'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum',
  'multipleOf', 'minProperties', 'maxProperties', 'not']);
const ANNOTATIONS = new Set(['title', 'description', 'default', 'examples', '$schema', '$id', 'id', '$comment',
  'deprecated', 'readOnly', 'writeOnly', 'discriminator', '$defs', 'definitions']);
const FORMATS = new Set(['date', 'time', 'date-time', 'uuid', 'email', 'ipv4', 'ipv6', 'uri']);

// Groups left out although their keywords are supported, with the reason (file: description).
const EXCLUDED = {
  'optional/bignum.json: integer': 'a bignum integer is written by JSON.stringify with an exponent (1.2345678910111214e+52); the grammar writes integers without one',
  'optional/bignum.json: integer comparison': 'bounds beyond 1e18 are refused by the compiler',
  'optional/bignum.json: float comparison with high precision': 'bounds beyond 1e18 are refused by the compiler',
  'optional/bignum.json: float comparison with high precision on negative numbers': 'bounds beyond 1e18 are refused by the compiler',
  'multipleOf.json: by number': 'multipleOf 1.5: only integer multipleOf is supported (the compiler refuses others)',
  'multipleOf.json: by small number': 'multipleOf 0.0001: only integer multipleOf is supported (the compiler refuses others)',
  'not.json: not more complex schema': '"not" of an object schema: the compiler supports "not" of types only',
  'oneOf.json: oneOf': 'the branches overlap (integer, minimum 2): the compiler refuses a oneOf it cannot prove exclusive',
  'oneOf.json: oneOf with base schema': 'the branches overlap (minLength 2, maxLength 4): the compiler refuses a oneOf it cannot prove exclusive',
};

// Why a schema is outside the table, or null when it is inside.
function unsupported(schema, where) {
  if (typeof schema === 'boolean') return null;
  if (schema === null || typeof schema !== 'object' || Array.isArray(schema)) return `${where} is not a schema`;
  for (const [k, v] of Object.entries(schema)) {
    if (ANNOTATIONS.has(k)) {
      if (k === '$id' || k === 'id') {
        if (where !== '' && typeof v === 'string') return `"${k}" in a subschema (a new base URI)`;
      }
      if (k === 'definitions' || k === '$defs') {
        for (const [name, sub] of Object.entries(v)) {
          const why = unsupported(sub, `${where}/${k}/${name}`);
          if (why) return why;
        }
      }
      continue;
    }
    if (!SUPPORTED.has(k)) return `keyword "${k}"`;
    if (k === 'uniqueItems' && v !== false) return 'keyword "uniqueItems": true';
    if (k === 'format' && !FORMATS.has(v)) return `format "${v}"`;
    if (k === '$ref' && !(v === '#' || String(v).startsWith('#/'))) return `$ref "${v}" (not a local JSON pointer)`;
    const subs = [];
    if (['properties'].includes(k)) for (const [n, s] of Object.entries(v)) subs.push([s, `${where}/${k}/${n}`]);
    if (['additionalProperties', 'additionalItems'].includes(k) && typeof v === 'object') subs.push([v, `${where}/${k}`]);
    if (k === 'items') {
      if (Array.isArray(v)) v.forEach((s, i) => subs.push([s, `${where}/items/${i}`]));
      else subs.push([v, `${where}/items`]);
    }
    if (['allOf', 'anyOf', 'oneOf', 'prefixItems'].includes(k)) v.forEach((s, i) => subs.push([s, `${where}/${k}/${i}`]));
    for (const [s, w] of subs) {
      const why = unsupported(s, w);
      if (why) return why;
    }
  }
  return null;
}

// Follows a local $ref ("#", "#/a/b" with ~0 ~1 and %XX) from the root.
function resolve(ref, root) {
  let at = root;
  const pointer = decodeURIComponent(ref.slice(1));
  if (pointer === '') return root;
  for (const raw of pointer.split('/').slice(1)) {
    const key = raw.replace(/~1/g, '/').replace(/~0/g, '~');
    if (at === null || typeof at !== 'object' || !(key in at)) return undefined;
    at = at[key];
  }
  return at;
}

function deepEqual(a, b) {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a), kb = Object.keys(b);
  return ka.length === kb.length && ka.every((k) => k in b && deepEqual(a[k], b[k]));
}

const escapeToken = (t) => encodeURIComponent(String(t).replace(/~/g, '~0').replace(/\//g, '~1'));

// The instance with every object's keys in the grammar's order: the declared properties of the schemas that
// apply, in the order the compiler merges them (a schema's own, then its allOf branches' depth-first, then its
// $ref target's; then those of the anyOf/oneOf branch the value belongs to, which ajv picks through
// `ctx.valid(ptr, value)`),
// then `required` names none declares, then the other keys as they were. A value equal to an enum/const value
// takes that value's order (the grammar writes enum values as the schema has them). `parts`: [schema, JSON
// pointer] pairs that all apply to `value`.
function reorder(value, parts, ctx, depth = 0) {
  if (depth > 50 || value === null || typeof value !== 'object') return value;
  const applied = [];   // [schema, pointer] in merge order
  const choices = [];   // [anyOf/oneOf list, its pointer]
  const gather = (schema, ptr, d) => {
    if (d > 20 || schema === null || typeof schema !== 'object') return;
    applied.push([schema, ptr]);
    (schema.allOf || []).forEach((b, i) => gather(b, `${ptr}/allOf/${i}`, d + 1));
    if (schema.$ref) {
      const tptr = decodeURIComponent(schema.$ref.slice(1)).split('/').slice(1).map(escapeToken).map((t) => '/' + t).join('');
      gather(resolve(schema.$ref, ctx.root), tptr, d + 1);
    }
    for (const k of ['anyOf', 'oneOf']) if (schema[k]) choices.push([schema[k], `${ptr}/${k}`]);
  };
  for (const [schema, ptr] of parts) gather(schema, ptr, 0);
  for (let c = 0; c < choices.length; c++) {  // grows as chosen branches bring their own anyOf
    const [list, ptr] = choices[c];
    const i = list.findIndex((b, i) => ctx.valid(`${ptr}/${i}`, value));
    if (i >= 0) gather(list[i], `${ptr}/${i}`, 0);
  }
  for (const [schema] of applied) {
    const literals = [...(schema.enum || []), ...('const' in schema ? [schema.const] : [])];
    const literal = literals.find((v) => deepEqual(v, value));
    if (literal !== undefined) return literal;
  }
  if (Array.isArray(value)) {
    return value.map((v, i) => {
      const sub = [];
      for (const [p, pp] of applied) {
        if (Array.isArray(p.items)) {
          if (i < p.items.length) sub.push([p.items[i], `${pp}/items/${i}`]);
          else if (p.additionalItems) sub.push([p.additionalItems, `${pp}/additionalItems`]);
        } else if (p.prefixItems && i < p.prefixItems.length) {
          sub.push([p.prefixItems[i], `${pp}/prefixItems/${i}`]);
        } else if (p.items) {
          sub.push([p.items, `${pp}/items`]);
        }
      }
      return reorder(v, sub, ctx, depth + 1);
    });
  }
  const declared = [], required = [];
  for (const [p] of applied) {
    for (const k of Object.keys(p.properties || {})) if (!declared.includes(k)) declared.push(k);
    for (const k of p.required || []) if (!required.includes(k)) required.push(k);
  }
  const order = [...declared, ...required.filter((k) => !declared.includes(k))];
  const keys = [...order.filter((k) => k in value), ...Object.keys(value).filter((k) => !order.includes(k))];
  const out = {};
  for (const k of keys) {
    const sub = [];
    for (const [p, pp] of applied) {
      if (p.properties && k in p.properties) sub.push([p.properties[k], `${pp}/properties/${escapeToken(k)}`]);
      else if (p.additionalProperties && typeof p.additionalProperties === 'object') sub.push([p.additionalProperties, `${pp}/additionalProperties`]);
    }
    out[k] = reorder(value[k], sub, ctx, depth + 1);
  }
  return out;
}

// ajv for one group: `valid(ptr, value)` validates against the subschema at `ptr` (refs resolve in the group's
// schema, added under a private id).
function context(AjvClass, schema) {
  const ajv = new AjvClass({ strict: false, validateSchema: false });
  addFormats(ajv);
  if (typeof schema === 'object') ajv.addSchema(schema, 'http://inflight.invalid/group.json');
  const cache = new Map();
  return {
    root: schema,
    valid(ptr, value) {
      if (!cache.has(ptr)) cache.set(ptr, ajv.getSchema(`http://inflight.invalid/group.json#${ptr}`));
      const v = cache.get(ptr);
      return v ? Boolean(v(value)) : false;
    },
  };
}

const ajv = new Ajv({ strict: false, allErrors: false, validateSchema: false });
addFormats(ajv);

const cases = [];
// The extra groups (extra_cases.mjs): 2020-12 schemas, every instance judged by ajv's 2020-12 class.
const ajv2020 = new Ajv2020({ strict: false });
addFormats(ajv2020);
let extra = 0;
for (const group of [...extraGroups, ...randomGroups]) {
  const key = `${group.may_refuse ? 'random_cases.mjs' : 'extra_cases.mjs'}: ${group.description}`;
  const why = unsupported(group.schema, '');
  if (why) throw new Error(`${key} uses ${why}: the extra cases must be supported`);
  const validate = ajv2020.compile(group.schema);
  const ctx = context(Ajv2020, group.schema);
  for (const test of group.tests) {
    const text = JSON.stringify(reorder(test.data, [[group.schema, '']], ctx));
    cases.push({ group: key, description: test.description, schema: group.schema, instance: text,
      valid: validate(JSON.parse(text)), may_refuse: Boolean(group.may_refuse) });
    extra++;
  }
}
const leftOut = [];
let kept = 0, leftOutTests = 0, disagreements = 0;
const files = [];
for (const f of fs.readdirSync(suiteDir).sort()) if (f.endsWith('.json')) files.push(f);
for (const f of fs.readdirSync(path.join(suiteDir, 'optional')).sort()) if (f.endsWith('.json')) files.push(`optional/${f}`);
for (const file of files) {
  const groups = JSON.parse(fs.readFileSync(path.join(suiteDir, file), 'utf8'));
  for (const group of groups) {
    const key = `${file}: ${group.description}`;
    const why = EXCLUDED[key] || unsupported(group.schema, '');
    if (why) {
      leftOut.push(`${key} -- ${why} (${group.tests.length} tests)`);
      leftOutTests += group.tests.length;
      continue;
    }
    const validate = ajv.compile(group.schema);
    const ctx = context(Ajv, group.schema);
    for (const test of group.tests) {
      const text = JSON.stringify(reorder(test.data, [[group.schema, '']], ctx));
      const valid = validate(JSON.parse(text));
      if (valid !== test.valid) {
        disagreements++;
        console.log(`ajv and the suite disagree (ajv followed): ${key} / ${test.description}: ajv ${valid}`);
      }
      cases.push({ group: key, description: test.description, schema: group.schema, instance: text, valid });
      kept++;
    }
  }
}
fs.writeFileSync(outPath, JSON.stringify(cases));
fs.writeFileSync(leftOutPath, leftOut.join('\n') + '\n');
console.log(`official suite (draft 4): ${kept} cases kept, ${leftOutTests} left out (${leftOut.length} groups), ${disagreements} ajv/suite disagreements; extra and random cases (2020-12): ${extra}`);
