// Chat messages -> prompt text through a Jinja chat template: the checkpoint's own (chat_template.jinja or
// tokenizer_config.json's chat_template, read by src/model/chat-template.ts) or --chat-template FILE.
// A model with neither cannot chat: the request is refused, naming the flag (no made-up format).
import { Template } from '@huggingface/jinja';
import { ResidencyError } from '../errors.ts';
import { ApiError } from './api-error.ts';
import type { ChatMessage, ChatTool } from './schemas.ts';

/**
 * The plain format of base models that have no chat format, as a Jinja template (the shipped tiny-moe
 * carries it as its chat_template.jinja): `<role>: <content>` per message, a blank line between
 * messages, then `assistant:` so the model continues as the assistant. Example: "user: hi\n\nassistant:".
 */
export const PLAIN_CHAT_TEMPLATE =
  "{% for m in messages %}{% if not loop.first %}{{ '\\n\\n' }}{% endif %}{{ m.role }}: {{ m.content }}{% endfor %}{% if add_generation_prompt %}{{ '\\n\\nassistant:' }}{% endif %}\n";

export type ChatTemplateSource = 'checkpoint' | '--chat-template' | 'none';

export interface ChatFormatter {
  /** Where the template came from, for logs and /v1/models. */
  readonly source: ChatTemplateSource;
  /** The template renders tools and its output marks calls as <tool_call>{json}</tool_call> (Hermes, Qwen). */
  readonly toolCallTags: boolean;
  render(messages: readonly ChatMessage[], opts?: { tools?: readonly ChatTool[] }): string;
}

function contentText(content: ChatMessage['content']): string {
  if (content == null) return '';
  return typeof content === 'string' ? content : content.map((p) => p.text).join('');
}

/** Messages as Hugging Face templates expect them: text content, tool-call arguments as objects. */
function templateMessage(m: ChatMessage): Record<string, unknown> {
  const out: Record<string, unknown> = { role: m.role, content: contentText(m.content) };
  if ('name' in m && m.name !== undefined) out['name'] = m.name;
  if (m.role === 'tool') out['tool_call_id'] = m.tool_call_id;
  if (m.role === 'assistant' && m.tool_calls) {
    out['tool_calls'] = m.tool_calls.map((c) => {
      let args: unknown = c.function.arguments;
      try { args = JSON.parse(c.function.arguments); } catch { /* kept as text */ }
      return { id: c.id, type: c.type, function: { name: c.function.name, arguments: args } };
    });
  }
  return out;
}

const noTemplate: ChatFormatter = {
  source: 'none',
  toolCallTags: false,
  render() {
    throw new ApiError(400, "this model has no chat template (neither chat_template.jinja nor tokenizer_config.json's chat_template): " +
      'start the server with --chat-template FILE, or send the prompt text to /v1/completions', { param: 'messages', code: 'chat_template_missing' });
  },
};

/** Compiles a template once; one that does not parse is refused at start, naming where it came from. */
export function chatFormatter(template: string | undefined, tokens: { bos?: string; eos?: string } = {}, source: Exclude<ChatTemplateSource, 'none'> = 'checkpoint'): ChatFormatter {
  if (!template) return noTemplate;
  let compiled: Template;
  try {
    compiled = new Template(template);
  } catch (e) {
    const where = source === 'checkpoint' ? "the checkpoint's chat template" : 'the --chat-template file';
    throw new ResidencyError(source === 'checkpoint' ? 'BAD_CHECKPOINT' : 'BAD_ARGUMENT', `${where} does not parse: ${(e as Error).message}`);
  }
  return {
    source,
    toolCallTags: template.includes('<tool_call>'),
    render(messages, opts = {}) {
      try {
        return compiled.render({
          messages: messages.map(templateMessage),
          ...(opts.tools && opts.tools.length > 0 ? { tools: opts.tools } : {}),
          add_generation_prompt: true,
          bos_token: tokens.bos ?? '',
          eos_token: tokens.eos ?? '',
        });
      } catch (e) {
        throw new ApiError(400, `the chat template could not render these messages: ${(e as Error).message}`, { param: 'messages', code: 'invalid_value' });
      }
    },
  };
}
