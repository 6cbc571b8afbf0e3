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
const suiteDir = path.join(path.dirname(require.resolve('json-schema-test-suite/package.json')), 'tests', 'draft4');

// engine/grammar/json_schema.h's table: supported keywords, annotations, and the containers of definitions.
const SUPPORTED = new Set(['type', 'enum', 'const', '$ref', 'allOf', 'anyOf', 'oneOf', 'properties', 'required',
  'additionalProperties', 'items', 'prefixItems', 'additionalItems', 'minItems', 'maxItems', 'uniqueItems',
  'minLength', 'maxLength', 'pattern', 'format', 'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum']);
const ANNOTATIONS = new Set(['title', 'description', 'default', 'examples', '$schema', '$id', 'id', '$comment',
  'deprecated', 'readOnly', 'writeOnly', '$defs', 'definitions']);
const FORMATS = new Set(['date', 'time', 'date-time', 'uuid', 'email', 'ipv4', 'ipv6']);

// Groups left out although their keywords are supported, with the reason (file: description).
const EXCLUDED = {
  'optional/bignum.json: integer': 'a bignum integer is written by JSON.stringify with an exponent (1.2345678910111214e+52); the grammar writes integers without one',
  'optional/bignum.json: integer comparison': 'bounds beyond 1e18 are refused by the compiler',
  'optional/bignum.json: float comparison with high precision': 'bounds beyond 1e18 are refused by the compiler',
  'optional/bignum.json: float comparison with high precision on negative numbers': 'bounds beyond 1e18 are refused by the compiler',
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

// The declared property names of `schema` in the order the grammar writes them: its own properties, then those
// of its allOf branches and $ref target (merged in that order), then required names not declared.
function propertyOrder(schema, root, depth = 0) {
  if (depth > 20 || schema === null || typeof schema !== 'object') return [];
  const names = [];
  const add = (list) => { for (const n of list) if (!names.includes(n)) names.push(n); };
  if (schema.$ref) {
    const target = resolve(schema.$ref, root);
    const rest = Object.keys(schema).filter((k) => k !== '$ref' && !ANNOTATIONS.has(k));
    if (rest.length === 0) return propertyOrder(target, root, depth + 1);
    add(Object.keys(schema.properties || {}));
    add(propertyOrder(target, root, depth + 1));
  } else {
    add(Object.keys(schema.properties || {}));
  }
  for (const branch of schema.allOf || []) add(propertyOrder(branch, root, depth + 1));
  add(schema.required || []);
  return names;
}

// The instance with every object's keys in the grammar's order; `schema` guides it where it can.
function reorder(value, schema, root, depth = 0) {
  if (depth > 50 || value === null || typeof value !== 'object') return value;
  while (schema && typeof schema === 'object' && schema.$ref && Object.keys(schema).length === 1) {
    schema = resolve(schema.$ref, root);
  }
  const s = schema && typeof schema === 'object' ? schema : {};
  const branches = [...(s.anyOf || []), ...(s.oneOf || [])];
  if (Array.isArray(value)) {
    return value.map((v, i) => {
      const sub = Array.isArray(s.items) ? (i < s.items.length ? s.items[i] : s.additionalItems) : s.items;
      return reorder(v, sub, root, depth + 1);
    });
  }
  let order = propertyOrder(s, root);
  // anyOf/oneOf: the order of the first branch that declares one of the instance's keys.
  for (const b of branches) {
    const o = propertyOrder(b, root);
    if (o.some((k) => k in value)) {
      order = [...order, ...o.filter((k) => !order.includes(k))];
      break;
    }
  }
  const out = {};
  const keys = [...order.filter((k) => k in value), ...Object.keys(value).filter((k) => !order.includes(k))];
  for (const k of keys) {
    const sub = (s.properties && k in s.properties) ? s.properties[k]
      : (typeof s.additionalProperties === 'object' ? s.additionalProperties : undefined);
    out[k] = reorder(value[k], sub, root, depth + 1);
  }
  return out;
}

const ajv = new Ajv({ strict: false, allErrors: false, validateSchema: false });
addFormats(ajv);

const cases = [];
// The extra groups (extra_cases.mjs): 2020-12 schemas, every instance judged by ajv's 2020-12 class.
const ajv2020 = new Ajv2020({ strict: false });
addFormats(ajv2020);
let extra = 0;
for (const group of extraGroups) {
  const key = `extra_cases.mjs: ${group.description}`;
  const why = unsupported(group.schema, '');
  if (why) throw new Error(`${key} uses ${why}: the extra cases must be supported`);
  const validate = ajv2020.compile(group.schema);
  for (const test of group.tests) {
    const text = JSON.stringify(reorder(test.data, group.schema, group.schema));
    cases.push({ group: key, description: test.description, schema: group.schema, instance: text, valid: validate(JSON.parse(text)) });
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
    for (const test of group.tests) {
      const text = JSON.stringify(reorder(test.data, group.schema, group.schema));
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
console.log(`official suite (draft 4): ${kept} cases kept, ${leftOutTests} left out (${leftOut.length} groups), ${disagreements} ajv/suite disagreements; extra cases (2020-12): ${extra}`);
