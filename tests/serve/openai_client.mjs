// tests/serve/openai_client.mjs — the official `openai` npm client (v4) against bonsai-serve's /v1:
// chat and completions, streaming and not. Prints "N passed, M failed"; exits 1 on any failure.
// Usage: node openai_client.mjs http://127.0.0.1:PORT/v1   (NODE_PATH must reach the openai package)
import { createRequire } from 'module';
const require = createRequire(process.env.NODE_PATH ? process.env.NODE_PATH + '/' : import.meta.url);
const OpenAI = require('openai');
const client = new OpenAI({ baseURL: process.argv[2], apiKey: 'unused' });
let passed = 0, failed = 0;
function check(cond, what) { if (cond) passed++; else { failed++; console.error('FAIL: ' + what); } }

const models = await client.models.list();
check(models.data.length === 1 && typeof models.data[0].id === 'string', 'models.list');

const chat = await client.chat.completions.create({
  model: 'any', messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 8, temperature: 0,
  logprobs: true, top_logprobs: 3 });
check(chat.object === 'chat.completion', 'chat object');
check(chat.choices[0].message.role === 'assistant' && typeof chat.choices[0].message.content === 'string', 'chat message');
check(chat.choices[0].logprobs.content.length > 0 && chat.choices[0].logprobs.content[0].top_logprobs.length === 3, 'chat logprobs');
check(chat.usage.prompt_tokens > 0 && chat.usage.total_tokens === chat.usage.prompt_tokens + chat.usage.completion_tokens, 'chat usage');

let text = '', sawUsage = false, sawFinish = false;
const stream = await client.chat.completions.create({
  model: 'any', messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 8, temperature: 0,
  stream: true, stream_options: { include_usage: true } });
for await (const chunk of stream) {
  if (chunk.usage) sawUsage = true;
  for (const c of chunk.choices) { text += c.delta.content ?? ''; if (c.finish_reason) sawFinish = true; }
}
check(text === chat.choices[0].message.content, 'streamed chat text == non-stream text');
check(sawUsage && sawFinish, 'stream finish + usage chunks');

const cmpl = await client.completions.create({ model: 'any', prompt: 'Once upon a time', max_tokens: 8, temperature: 0 });
check(cmpl.object === 'text_completion' && typeof cmpl.choices[0].text === 'string', 'completions');
let ctext = '';
const cstream = await client.completions.create({ model: 'any', prompt: 'Once upon a time', max_tokens: 8, temperature: 0, stream: true });
for await (const chunk of cstream) ctext += chunk.choices[0]?.text ?? '';
check(ctext === cmpl.choices[0].text, 'streamed completion text == non-stream text');

try {
  await client.chat.completions.create({ model: 'any', messages: 'oops' });
  check(false, 'bad request should throw');
} catch (e) { check(e.status === 400, 'bad request → 400 (got ' + e.status + ')'); }

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
