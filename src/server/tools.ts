// Tools in chat: what the template sees, when the output is forced to be a call (tool_choice 'required'
// or a named function: constrained to {"name", "arguments"}), and tool calls parsed back from the text.
import { randomUUID } from 'node:crypto';
import type { ValueShape } from '../structured/json-grammar.ts';
import { ApiError } from './api-error.ts';
import type { ChatFormatter } from './chat-template.ts';
import type { ChatRequest, ChatTool } from './schemas.ts';
import { shapeOf } from './structured-output.ts';

export interface ToolCall { id: string; type: 'function'; function: { name: string; arguments: string } }

export interface ToolPlan {
  /** Tools handed to the chat template (none when tool_choice is 'none'). */
  readonly tools: readonly ChatTool[];
  /** The output must be one call of this shape (constrained decoding). */
  readonly forced?: ValueShape;
  /** Parse <tool_call> blocks from the output (the template defines them). */
  readonly parse: boolean;
}

const esc = (s: string) => JSON.stringify(s).slice(1, -1);

export function planTools(req: Pick<ChatRequest, 'tools' | 'tool_choice'>, chat: ChatFormatter): ToolPlan {
  const tools = req.tools ?? [];
  const choice = req.tool_choice ?? (tools.length > 0 ? 'auto' : 'none');
  if (tools.length === 0) {
    if (choice !== 'none' && req.tool_choice != null) throw new ApiError(400, 'tool_choice needs tools: send the functions in `tools`', { param: 'tool_choice', code: 'invalid_value' });
    return { tools: [], parse: false };
  }
  if (choice === 'none') return { tools: [], parse: false };
  if (choice === 'auto') return { tools, parse: chat.toolCallTags };
  if (choice === 'required') {
    // One of the tools by name; its arguments as any object (no union of the tools' schemas here).
    return { tools, parse: false, forced: callShape({ t: 'string', values: tools.map((t) => esc(t.function.name)) }, { t: 'object', props: null }) };
  }
  const tool = tools.find((t) => t.function.name === choice.function.name);
  if (!tool) throw new ApiError(400, `tool_choice.function.name '${choice.function.name}' is not one of tools[].function.name (${tools.map((t) => t.function.name).join(', ')})`, { param: 'tool_choice.function.name', code: 'invalid_value' });
  const params = tool.function.parameters;
  const args: ValueShape = params && Object.keys(params).length > 0 ? shapeOf(params, `tools[${tools.indexOf(tool)}].function.parameters`) : { t: 'object', props: null };
  return { tools, parse: false, forced: callShape({ t: 'string', values: [esc(tool.function.name)] }, args) };
}

function callShape(name: ValueShape, args: ValueShape): ValueShape {
  return { t: 'object', props: [['name', name], ['arguments', args]] };
}

const callId = () => `call_${randomUUID().replace(/-/g, '').slice(0, 24)}`;

function asCall(json: unknown): ToolCall | null {
  if (typeof json !== 'object' || json === null) return null;
  const o = json as { name?: unknown; arguments?: unknown; parameters?: unknown };
  if (typeof o.name !== 'string') return null;
  const args = o.arguments ?? o.parameters ?? {};
  return { id: callId(), type: 'function', function: { name: o.name, arguments: typeof args === 'string' ? args : JSON.stringify(args) } };
}

/** The forced output (one JSON call) as a tool call; null if it did not complete (max_tokens). */
export function forcedCall(text: string): ToolCall | null {
  try { return asCall(JSON.parse(text)); } catch { return null; }
}

/** <tool_call>{json}</tool_call> blocks out of the text; the rest is the content (null when empty). */
export function parseToolCalls(text: string): { content: string | null; calls: ToolCall[] } {
  const calls: ToolCall[] = [];
  const rest = text.replace(/<tool_call>([\s\S]*?)<\/tool_call>/g, (whole, body: string) => {
    let call: ToolCall | null = null;
    try { call = asCall(JSON.parse(body.trim())); } catch { /* not a call: left in the content */ }
    if (!call) return whole;
    calls.push(call);
    return '';
  });
  const content = rest.trim();
  return { content: content === '' ? null : calls.length > 0 ? content : text, calls };
}
