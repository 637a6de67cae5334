// vLLM's /tokenize and /detokenize, and /version: what clients use to count tokens and check the server.
import type { Hono } from 'hono';
import { VERSION } from '../version.ts';
import { ApiError } from './api-error.ts';
import { readJsonBody } from './body.ts';
import type { ChatFormatter } from './chat-template.ts';
import { checkModel } from './completions.ts';
import { checkPromptChars, encodePrompt } from './prompt-tokenizer.ts';
import { chatSchema } from './schemas.ts';
import type { ServerConfig, ServerModel } from './types.ts';

export function tokenizeRoutes(app: Hono, model: ServerModel, chat: ChatFormatter, config: ServerConfig): void {
  app.post('/tokenize', async (c) => {
    const req = await readJsonBody(c, { name: 'tokenize' }, config.maxBodyBytes);
    checkModel(model, req.model);
    let text: string;
    if ('prompt' in req) text = req.prompt;
    else {
      const parsed = chatSchema(model.maxPositions).shape.messages.safeParse(req.messages);
      if (!parsed.success) throw new ApiError(400, `messages: ${parsed.error.issues[0]!.message}`, { param: 'messages', code: 'invalid_value' });
      text = chat.render(parsed.data);
    }
    checkPromptChars(text.length, model.maxPositions, config, 'prompt' in req ? 'prompt' : 'messages');
    const tokens = await encodePrompt(model.tokenizer, text);
    return c.json({ count: tokens.length, max_model_len: model.maxPositions, tokens });
  });
  app.post('/detokenize', async (c) => {
    const req = await readJsonBody(c, { name: 'detokenize', vocabSize: model.tokenizer.vocabSize }, config.maxBodyBytes);
    checkModel(model, req.model);
    return c.json({ prompt: model.tokenizer.decode(req.tokens) });
  });
  app.get('/version', (c) => c.json({ version: VERSION }));
}
