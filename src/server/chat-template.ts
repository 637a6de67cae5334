// Chat messages -> prompt text: the checkpoint's Jinja chat template (tokenizer_config.json's
// `chat_template`) when it ships one, else the plain template below.
//
// The plain template (for base models such as the shipped tiny-moe, which have no chat format):
//   one line per message, `<role>: <content>`, messages separated by a blank line, then `assistant:`
//   so the model continues as the assistant. Example: "user: hi\n\nassistant:".
import { Template } from '@huggingface/jinja';
import { ResidencyError } from '../errors.ts';
import type { ChatMessage } from './schemas.ts';

export interface ChatFormatter {
  /** The template's name for logs and /v1/models: 'checkpoint' or 'plain'. */
  readonly kind: 'checkpoint' | 'plain';
  render(messages: readonly ChatMessage[]): string;
}

function contentText(m: ChatMessage): string {
  return typeof m.content === 'string' ? m.content : m.content.map((p) => p.text).join('');
}

export const plainChat: ChatFormatter = {
  kind: 'plain',
  render(messages) {
    return messages.map((m) => `${m.role}: ${contentText(m)}`).join('\n\n') + '\n\nassistant:';
  },
};

/** Compiles the checkpoint's template once; a template that does not parse is a bad checkpoint. */
export function chatFormatter(template: string | undefined, tokens: { bos?: string; eos?: string } = {}): ChatFormatter {
  if (!template) return plainChat;
  let compiled: Template;
  try {
    compiled = new Template(template);
  } catch (e) {
    throw new ResidencyError('BAD_CHECKPOINT', `tokenizer_config.json chat_template does not parse: ${(e as Error).message}`);
  }
  return {
    kind: 'checkpoint',
    render(messages) {
      return compiled.render({
        messages: messages.map((m) => ({ role: m.role, content: contentText(m) })),
        add_generation_prompt: true,
        bos_token: tokens.bos ?? '',
        eos_token: tokens.eos ?? '',
      });
    },
  };
}
