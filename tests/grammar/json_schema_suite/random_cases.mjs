// Random schemas over the supported keywords, each with instances sampled from it and mutated (valid and invalid
// ones), in the suite's shape. Deterministic (a seeded generator): the same groups on every run. ajv judges each
// instance; the compiler may refuse a random schema (e.g. a oneOf it cannot prove exclusive, an empty range):
// such groups are counted apart (`may_refuse`), never as agreement.
function mulberry32(seed) {
  return () => {
    seed |= 0; seed = (seed + 0x6D2B79F5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const rand = mulberry32(20261207);
const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));
const pick = (list) => list[int(0, list.length - 1)];
const chance = (p) => rand() < p;

const NAMES = ['a', 'b', 'c', 'ab', 'a b', 'é', 'x"y', 'id', 'name'];
const CHARS = ['a', 'b', 'z', '0', '7', ' ', '-', 'é', '😀', '"', '\\', '\n', '\u0001', '/', 'A'];
const PATTERNS = ['^a+$', 'b', '^[a-z]{1,3}$', '\\d', '^(ab|c)*$', '^[^a]*$', 'é', '^.{2}$', '^\\w+-\\d?$'];
const FORMATS = ['date', 'time', 'date-time', 'uuid', 'email', 'ipv4', 'ipv6', 'uri'];
const FORMAT_SAMPLES = ['2024-02-29', '2023-02-29', '12:00:00Z', '25:00:00Z', '2024-01-01T00:00:00Z',
  '123e4567-e89b-12d3-a456-426614174000', 'joe@example.com', 'joe@', '10.0.0.1', '300.0.0.1', '::1', '1::2::3',
  'https://example.com/x?y#z', 'no scheme'];

function randomString(max = 5) {
  let s = '';
  for (let i = int(0, max); i > 0; i--) s += pick(CHARS);
  return s;
}
function randomValue(depth = 0) {
  switch (int(0, depth > 1 ? 4 : 6)) {
    case 0: return null;
    case 1: return chance(0.5);
    case 2: return int(-60, 60);
    case 3: return int(-240, 240) / 8;
    case 4: return randomString();
    case 5: return Array.from({ length: int(0, 3) }, () => randomValue(depth + 1));
    default: {
      const o = {};
      for (let i = int(0, 3); i > 0; i--) o[pick(NAMES)] = randomValue(depth + 1);
      return o;
    }
  }
}

function leaf() {
  switch (int(0, 12)) {
    case 12: return { type: pick(['integer', 'number']), multipleOf: pick([2, 3, 5, 10]) };
    case 0: { const lo = int(-50, 20); return { type: 'integer', minimum: lo, maximum: lo + int(0, 80) }; }
    case 1: return { type: 'integer', exclusiveMinimum: int(-30, 30) + (chance(0.3) ? 0.5 : 0) };
    case 2: { const lo = int(-20, 10) / 4; return { type: 'number', minimum: lo, exclusiveMaximum: lo + int(1, 40) / 4 }; }
    case 3: return { type: 'number', maximum: int(-20, 20) / 8 };
    case 4: { const lo = int(0, 3); return { type: 'string', minLength: lo, maxLength: lo + int(0, 3) }; }
    case 5: return { type: 'string', pattern: pick(PATTERNS) };
    case 6: return { type: 'string', format: pick(FORMATS) };
    case 7: return { enum: Array.from({ length: int(1, 4) }, () => randomValue(1)) };
    case 8: return { const: randomValue(1) };
    case 9: return { type: pick([['integer', 'null'], ['boolean'], ['string', 'number'], 'null']) };
    case 10: return chance(0.5) ? {} : true;
    default: return { type: 'integer' };
  }
}

function schema(depth) {
  if (depth > 2 || chance(0.3)) return leaf();
  switch (int(0, 5)) {
    case 0: case 1: {
      const s = { type: 'object', properties: {} };
      for (let i = int(1, 4); i > 0; i--) s.properties[pick(NAMES)] = schema(depth + 1);
      const names = Object.keys(s.properties);
      s.required = names.filter(() => chance(0.5));
      if (chance(0.2)) s.required.push(pick(NAMES));
      s.required = [...new Set(s.required)];
      if (chance(0.2)) s.minProperties = int(0, 3);
      if (chance(0.2)) s.maxProperties = int(1, 4);
      const add = int(0, 3);
      if (add === 1) s.additionalProperties = false;
      if (add === 2) s.additionalProperties = schema(depth + 1);
      return s;
    }
    case 2: {
      const s = { type: 'array' };
      if (chance(0.5)) s.prefixItems = Array.from({ length: int(1, 3) }, () => schema(depth + 1));
      const items = int(0, 2);
      if (items === 1) s.items = schema(depth + 1);
      if (items === 2) s.items = false;
      if (chance(0.4)) s.minItems = int(0, 2);
      if (chance(0.4)) s.maxItems = int(1, 4);
      return s;
    }
    case 3: return { anyOf: Array.from({ length: int(2, 3) }, () => schema(depth + 1)) };
    case 4: return { oneOf: [{ type: 'string', maxLength: 3 }, { type: 'integer' }, { type: 'object', properties: { k: schema(depth + 1) } }].slice(0, int(2, 3)) };
    default: return { allOf: [schema(depth + 1), { type: 'object', properties: { [pick(NAMES)]: leaf() }, required: chance(0.5) ? [pick(NAMES)] : [] }] };
  }
}

// Instances that tend to satisfy `s` (ajv decides whether they do).
function sample(s, depth = 0) {
  if (s === true || s === undefined) return randomValue(2);
  if (s === false) return null;
  if (depth > 6) return null;
  if (s.const !== undefined) return s.const;
  if (s.enum) return pick(s.enum);
  if (s.anyOf) return sample(pick(s.anyOf), depth + 1);
  if (s.oneOf) return sample(pick(s.oneOf), depth + 1);
  if (s.allOf) {
    const parts = s.allOf.map((b) => sample(b, depth + 1));
    const objects = parts.filter((p) => p && typeof p === 'object' && !Array.isArray(p));
    return objects.length === parts.length ? Object.assign({}, ...objects) : parts[0];
  }
  const type = Array.isArray(s.type) ? pick(s.type) : s.type;
  switch (type) {
    case 'integer': {
      const lo = s.minimum ?? (s.exclusiveMinimum !== undefined ? Math.floor(s.exclusiveMinimum) + 1 : -20);
      const hi = s.maximum ?? (s.exclusiveMaximum !== undefined ? Math.ceil(s.exclusiveMaximum) - 1 : lo + 40);
      return int(Math.ceil(lo) - 1, Math.floor(hi) + 1);
    }
    case 'number': {
      const lo = s.minimum ?? s.exclusiveMinimum ?? -10, hi = s.maximum ?? s.exclusiveMaximum ?? lo + 10;
      return chance(0.2) ? pick([lo, hi]) : Math.round((lo - 0.5 + rand() * (hi - lo + 1)) * 16) / 16;
    }
    case 'string':
      if (s.format) return pick(FORMAT_SAMPLES);
      return randomString((s.maxLength ?? 4) + 1);
    case 'boolean': return chance(0.5);
    case 'null': return null;
    case 'array': {
      const n = int(s.minItems ?? 0, (s.maxItems ?? 3) + 1);
      return Array.from({ length: n }, (_, i) => sample(s.prefixItems && i < s.prefixItems.length ? s.prefixItems[i] : s.items, depth + 1));
    }
    case 'object': {
      const o = {};
      for (const [k, v] of Object.entries(s.properties || {})) if ((s.required || []).includes(k) || chance(0.6)) o[k] = sample(v, depth + 1);
      for (const k of s.required || []) if (!(k in o)) o[k] = sample(s.additionalProperties, depth + 1);
      if (chance(0.3)) o[pick(NAMES) + pick(['', 'x'])] = sample(s.additionalProperties, depth + 1);
      return o;
    }
    default: return randomValue(1);
  }
}

const groups = [];
for (let g = 0; g < 500; g++) {
  const s = schema(0);
  const seen = new Set();
  const tests = [];
  for (let i = 0; i < 14; i++) {
    const data = i < 10 ? sample(s) : randomValue();
    const key = JSON.stringify(data);
    if (data === undefined || seen.has(key)) continue;
    seen.add(key);
    tests.push({ description: key, data });
  }
  groups.push({ description: `random schema ${g}`, schema: s, tests, may_refuse: true });
}
export default groups;
