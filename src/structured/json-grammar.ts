// A character-level pushdown recognizer for JSON values, optionally shaped by a compiled schema (schema.ts).
// States are immutable frames linked to their parent, so trying a token from the current state costs no copy.

/** What a value may be: compiled from a JSON schema (schema.ts), or 'any' for free JSON. */
export type ValueShape =
  | { readonly t: 'any' }
  /** props: the keys in order, every one emitted; null = any keys (values free). */
  | { readonly t: 'object'; readonly props: readonly (readonly [string, ValueShape])[] | null }
  | { readonly t: 'array'; readonly items: ValueShape }
  /** values: the allowed strings (JSON-escaped contents), or null for any string. */
  | { readonly t: 'string'; readonly values: readonly string[] | null }
  | { readonly t: 'number'; readonly integer: boolean }
  | { readonly t: 'boolean' }
  | { readonly t: 'null' };

export const ANY: ValueShape = { t: 'any' };

export type Frame =
  | { readonly k: 'end' }
  | { readonly k: 'val'; readonly shape: ValueShape; readonly up: Parent }
  | { readonly k: 'str'; readonly values: readonly string[] | null; readonly acc: string; readonly esc: number; readonly up: Parent }
  | { readonly k: 'num'; readonly integer: boolean; readonly st: number; readonly len: number; readonly up: Parent }
  | { readonly k: 'lit'; readonly word: string; readonly pos: number; readonly up: Parent }
  | ObjFrame
  | ArrFrame;

interface ObjFrame { readonly k: 'obj'; readonly shape: Extract<ValueShape, { t: 'object' }>; readonly ph: 'first' | 'key' | 'colon' | 'value' | 'after' | 'comma'; readonly i: number; readonly up: Parent }
interface ArrFrame { readonly k: 'arr'; readonly shape: Extract<ValueShape, { t: 'array' }>; readonly ph: 'first' | 'after' | 'comma'; readonly up: Parent }
/** The frame a finished value returns to (an object or array waiting for it), or null at the top. */
type Parent = ObjFrame | ArrFrame | null;

export interface GrammarState {
  readonly f: Frame;
  /** Structural whitespace characters in a row (bounded, so a model cannot pad forever). */
  readonly ws: number;
}

/**
 * Structural whitespace is at most one space in a row (no newlines or tabs): the output is compact JSON,
 * as xgrammar's default without any_whitespace; small models otherwise spend their tokens on padding.
 */
const MAX_WS = 1;
const MAX_NUMBER = 24;
const END: Frame = { k: 'end' };

export function initialState(root: ValueShape): GrammarState {
  return { f: { k: 'val', shape: root, up: null }, ws: 0 };
}

export const isComplete = (s: GrammarState): boolean => s.f.k === 'end';

const isWs = (ch: string) => ch === ' ' || ch === '\n' || ch === '\t' || ch === '\r';
const isDigit = (ch: string) => ch >= '0' && ch <= '9';
const isHex = (ch: string) => isDigit(ch) || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F');

/** The state after `text`, or null when the text cannot continue a valid value here. */
export function advance(s: GrammarState, text: string): GrammarState | null {
  let f = s.f;
  let ws = s.ws;
  for (const ch of text) {
    const next = step(f, ch);
    if (next === null) return null;
    const structural = isWs(ch) && next.k !== 'str';
    if (structural && ch !== ' ') return null;
    ws = structural ? ws + 1 : 0;
    if (ws > MAX_WS) return null;
    f = next;
  }
  return { f, ws };
}

/** A finished value hands control back to its parent. */
function resume(up: Parent): Frame {
  if (up === null) return END;
  if (up.k === 'arr') return { ...up, ph: 'after' };
  return { ...up, ph: up.ph === 'key' ? 'colon' : 'after' };
}

function step(f: Frame, ch: string): Frame | null {
  switch (f.k) {
    case 'end': return null;
    // The output starts with its value: no padding before the top level.
    case 'val': return isWs(ch) ? (f.up === null ? null : f) : startValue(f.shape, ch, f.up);
    case 'str': return stepString(f, ch);
    case 'num': return stepNumber(f, ch);
    case 'lit':
      if (f.word[f.pos] !== ch) return null;
      return f.pos + 1 === f.word.length ? resume(f.up) : { ...f, pos: f.pos + 1 };
    case 'obj': return stepObject(f, ch);
    case 'arr': return stepArray(f, ch);
  }
}

function startValue(shape: ValueShape, ch: string, up: Parent): Frame | null {
  const t = shape.t;
  if (ch === '{' && (t === 'object' || t === 'any')) return { k: 'obj', shape: t === 'object' ? shape : FREE_OBJECT, ph: 'first', i: 0, up };
  if (ch === '[' && (t === 'array' || t === 'any')) return { k: 'arr', shape: t === 'array' ? shape : FREE_ARRAY, ph: 'first', up };
  if (ch === '"' && (t === 'string' || t === 'any')) return { k: 'str', values: t === 'string' ? shape.values : null, acc: '', esc: 0, up };
  if ((ch === '-' || isDigit(ch)) && (t === 'number' || t === 'any')) {
    return stepNumber({ k: 'num', integer: t === 'number' && shape.integer, st: 0, len: 0, up }, ch);
  }
  if ((ch === 't' || ch === 'f') && (t === 'boolean' || t === 'any')) return { k: 'lit', word: ch === 't' ? 'true' : 'false', pos: 1, up };
  if (ch === 'n' && (t === 'null' || t === 'any')) return { k: 'lit', word: 'null', pos: 1, up };
  return null;
}

const FREE_OBJECT = { t: 'object', props: null } as const;
const FREE_ARRAY = { t: 'array', items: ANY } as const;

function stepString(f: Extract<Frame, { k: 'str' }>, ch: string): Frame | null {
  if (f.values !== null) {
    // An enum: the contents so far must start one of the allowed (already escaped) strings.
    if (ch === '"' && f.esc === 0 && f.values.includes(f.acc)) return resume(f.up);
    const acc = f.acc + ch;
    if (!f.values.some((v) => v.startsWith(acc))) return null;
    return { ...f, acc, esc: f.esc === 0 && ch === '\\' ? 1 : 0 };
  }
  if (f.esc === 0) {
    if (ch === '"') return resume(f.up);
    if (ch === '\\') return { ...f, esc: 1 };
    return ch.charCodeAt(0) < 0x20 ? null : f;
  }
  if (f.esc === 1) {
    if ('"\\/bfnrt'.includes(ch)) return { ...f, esc: 0 };
    return ch === 'u' ? { ...f, esc: 2 } : null;
  }
  if (!isHex(ch)) return null;
  return { ...f, esc: f.esc === 5 ? 0 : f.esc + 1 };
}

/** JSON number states: 0 start, 1 after '-', 2 leading 0, 3 integer digits, 4 after '.', 5 fraction, 6 after e, 7 exponent sign, 8 exponent digits. */
const ACCEPTING = new Set([2, 3, 5, 8]);

function stepNumber(f: Extract<Frame, { k: 'num' }>, ch: string): Frame | null {
  const to = (st: number): Frame | null => (f.len + 1 > MAX_NUMBER ? null : { ...f, st, len: f.len + 1 });
  const d = isDigit(ch);
  switch (f.st) {
    case 0: return ch === '-' ? to(1) : ch === '0' ? to(2) : d ? to(3) : null;
    case 1: return ch === '0' ? to(2) : d ? to(3) : null;
    case 2: case 3: case 5: case 8: {
      if (d && f.st !== 2) return to(f.st);
      if (!f.integer && ch === '.' && f.st <= 3) return to(4);
      if (!f.integer && (ch === 'e' || ch === 'E') && f.st !== 8) return to(6);
      // The number ended one character ago: that character belongs to the parent.
      return ACCEPTING.has(f.st) && f.up !== null ? step(resume(f.up), ch) : null;
    }
    case 4: return d ? to(5) : null;
    case 6: return ch === '+' || ch === '-' ? to(7) : d ? to(8) : null;
    case 7: return d ? to(8) : null;
    default: return null;
  }
}

function keyFrame(o: ObjFrame, ch: string): Frame | null {
  if (ch !== '"') return null;
  const props = o.shape.props;
  const up: ObjFrame = { ...o, ph: 'key' };
  return { k: 'str', values: props === null ? null : [JSON.stringify(props[o.i]![0]).slice(1, -1)], acc: '', esc: 0, up };
}

function stepObject(o: ObjFrame, ch: string): Frame | null {
  if (isWs(ch)) return o.ph === 'key' || o.ph === 'value' ? null : o;
  const props = o.shape.props;
  switch (o.ph) {
    case 'first':
      if (ch === '}') return props === null || props.length === 0 ? resume(o.up) : null;
      return props !== null && props.length === 0 ? null : keyFrame(o, ch);
    case 'colon':
      return ch === ':' ? { k: 'val', shape: props === null ? ANY : props[o.i]![1], up: { ...o, ph: 'value' } } : null;
    case 'after':
      if (ch === '}') return props === null || o.i + 1 === props.length ? resume(o.up) : null;
      if (ch !== ',') return null;
      if (props === null) return { ...o, ph: 'comma' };
      return o.i + 1 < props.length ? { ...o, ph: 'comma', i: o.i + 1 } : null;
    case 'comma':
      return keyFrame(o, ch);
    default:
      return null;
  }
}

function stepArray(a: ArrFrame, ch: string): Frame | null {
  if (isWs(ch)) return a;
  const after: ArrFrame = { ...a, ph: 'after' };
  switch (a.ph) {
    case 'first':
      return ch === ']' ? resume(a.up) : startValue(a.shape.items, ch, after);
    case 'after':
      return ch === ']' ? resume(a.up) : ch === ',' ? { ...a, ph: 'comma' } : null;
    case 'comma':
      return startValue(a.shape.items, ch, after);
  }
}
