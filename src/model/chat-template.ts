// The checkpoint's chat template, where transformers looks for it: chat_template.jinja beside the weights
// (newer checkpoints, gpt-oss and DeepSeek among them; it wins over tokenizer_config.json, as in
// transformers), else tokenizer_config.json's chat_template (a string, or named templates: "default").

import { join } from 'node:path';
import { ResidencyError } from '../errors.ts';
import { readRegularFile } from '../util/regular-file.ts';

export const CHAT_TEMPLATE_FILE = 'chat_template.jinja';

/** The template text, or undefined when the checkpoint ships none (base models). */
export async function readChatTemplate(dir: string): Promise<string | undefined> {
  const file = await readOptional(join(dir, CHAT_TEMPLATE_FILE));
  if (file !== undefined) return file;
  const cfgText = await readOptional(join(dir, 'tokenizer_config.json'));
  if (cfgText === undefined) return undefined;
  let cfg: unknown;
  try {
    cfg = JSON.parse(cfgText);
  } catch (e) {
    throw new ResidencyError('BAD_CHECKPOINT', `tokenizer_config.json: not valid JSON: ${(e as Error).message}`);
  }
  let t = (cfg as Record<string, unknown> | null)?.['chat_template'];
  if (Array.isArray(t)) t = ((t.find((x) => x?.name === 'default') ?? t[0]) as { template?: unknown } | undefined)?.template;
  if (t === undefined || t === null) return undefined;
  if (typeof t !== 'string') throw new ResidencyError('BAD_CHECKPOINT', 'tokenizer_config.json: chat_template must be a string or a list of {name, template}');
  return t;
}

async function readOptional(path: string): Promise<string | undefined> {
  try {
    return await readRegularFile(path);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new ResidencyError('BAD_CHECKPOINT', `cannot read ${path}: ${(e as Error).message}`, { cause: e });
  }
}
