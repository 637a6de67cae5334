// JSON schema -> ValueShape, for response_format json_schema and tool arguments. A documented subset:
// type (object, array, string, number, integer, boolean, null), properties (all emitted, in order),
// items, enum / const of strings; annotations are ignored. Anything else is refused by name.
import { ANY, type ValueShape } from './json-grammar.ts';

/** Keywords that describe without constraining, or that the shape satisfies by construction. */
const IGNORED = new Set(['title', 'description', '$schema', '$id', 'default', 'examples', 'required', 'additionalProperties', 'strict']);
const KNOWN = new Set(['type', 'properties', 'items', 'enum', 'const']);

export class SchemaError extends Error {
  constructor(readonly path: string, message: string) {
    super(`${path}: ${message}`);
  }
}

const escaped = (s: string) => JSON.stringify(s).slice(1, -1);

export function compileSchema(schema: unknown, path = 'schema'): ValueShape {
  if (schema === true) return ANY;
  if (typeof schema !== 'object' || schema === null || Array.isArray(schema)) throw new SchemaError(path, 'expected a JSON schema object');
  const s = schema as Record<string, unknown>;
  for (const k of Object.keys(s)) {
    if (!KNOWN.has(k) && !IGNORED.has(k)) {
      throw new SchemaError(`${path}.${k}`, `'${k}' is not supported by this server's constrained decoding (supported: type, properties, items, enum and const of strings)`);
    }
  }
  const en = s['const'] !== undefined ? [s['const']] : s['enum'];
  if (en !== undefined) {
    if (!Array.isArray(en) || en.length === 0 || !en.every((v) => typeof v === 'string')) throw new SchemaError(`${path}.enum`, 'only a non-empty list of strings is supported');
    return { t: 'string', values: (en as string[]).map(escaped) };
  }
  const type = s['type'];
  if (type === undefined) return s['properties'] !== undefined ? objectShape(s, path) : ANY;
  switch (type) {
    case 'object': return objectShape(s, path);
    case 'array': return { t: 'array', items: s['items'] === undefined ? ANY : compileSchema(s['items'], `${path}.items`) };
    case 'string': return { t: 'string', values: null };
    case 'number': return { t: 'number', integer: false };
    case 'integer': return { t: 'number', integer: true };
    case 'boolean': return { t: 'boolean' };
    case 'null': return { t: 'null' };
    default: throw new SchemaError(`${path}.type`, `${JSON.stringify(type)}: expected one of object, array, string, number, integer, boolean, null`);
  }
}

function objectShape(s: Record<string, unknown>, path: string): ValueShape {
  const props = s['properties'];
  if (props === undefined) return { t: 'object', props: null };
  if (typeof props !== 'object' || props === null || Array.isArray(props)) throw new SchemaError(`${path}.properties`, 'expected an object of schemas');
  return { t: 'object', props: Object.entries(props).map(([k, v]) => [k, compileSchema(v, `${path}.properties.${k}`)] as const) };
}
