// The checkpoint's chat template: chat_template.jinja first, then tokenizer_config.json; rendered by the
// server's formatter (templates of our own in the shape gpt-oss and DeepSeek ship).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { readChatTemplate } from '../model/chat-template.ts';
import { withTempDir } from '../model/test-helpers.ts';
import { chatFormatter } from './chat-template.ts';

const DEEPSEEK = "{{ bos_token }}{% for m in messages %}{% if m.role == 'user' %}<｜User｜>{{ m.content }}{% elif m.role == 'assistant' %}<｜Assistant｜>{{ m.content }}{{ eos_token }}{% endif %}{% endfor %}{% if add_generation_prompt %}<｜Assistant｜>{% endif %}";
const HARMONY = '{% for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{% endfor %}{% if add_generation_prompt %}<|start|>assistant{% endif %}';

describe('chat template of a checkpoint', () => {
  it('chat_template.jinja wins over tokenizer_config.json, and renders', async () => {
    await withTempDir(async (dir) => {
      await writeFile(join(dir, 'tokenizer_config.json'), JSON.stringify({ chat_template: DEEPSEEK }));
      await writeFile(join(dir, 'chat_template.jinja'), HARMONY);
      const t = await readChatTemplate(dir);
      assert.equal(t, HARMONY);
      const out = chatFormatter(t).render([{ role: 'user', content: 'hi' }]);
      assert.equal(out, '<|start|>user<|message|>hi<|end|><|start|>assistant');
    });
  });
  it('tokenizer_config.json: a string, or the "default" of named templates', async () => {
    await withTempDir(async (dir) => {
      await writeFile(join(dir, 'tokenizer_config.json'), JSON.stringify({ chat_template: [{ name: 'tool_use', template: 'x' }, { name: 'default', template: DEEPSEEK }] }));
      const t = await readChatTemplate(dir);
      assert.equal(t, DEEPSEEK);
      const out = chatFormatter(t, { bos: '<｜begin▁of▁sentence｜>', eos: '<｜end▁of▁sentence｜>' }).render([
        { role: 'user', content: 'a' }, { role: 'assistant', content: 'b' }, { role: 'user', content: 'c' },
      ]);
      assert.equal(out, '<｜begin▁of▁sentence｜><｜User｜>a<｜Assistant｜>b<｜end▁of▁sentence｜><｜User｜>c<｜Assistant｜>');
    });
  });
  it('none shipped: undefined (the server falls back to its plain template)', async () => {
    await withTempDir(async (dir) => {
      assert.equal(await readChatTemplate(dir), undefined);
      await writeFile(join(dir, 'tokenizer_config.json'), JSON.stringify({ eos_token: '<e>' }));
      assert.equal(await readChatTemplate(dir), undefined);
    });
  });
});
