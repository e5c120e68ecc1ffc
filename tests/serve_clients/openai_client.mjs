// The official `openai` npm client against `looplm serve` (tests/test_serve.cpp, ServeClients.OpenAi):
//   node openai_client.mjs CACHE BASE_URL MODEL API_KEY EXPECTED_JSON
// EXPECTED_JSON: {"prompt": ..., "max_tokens": N, "text": the greedy text `looplm generate` wrote}.
// Prints one line of JSON; exits 1 naming the first check that failed.
import { createRequire } from 'node:module';

const [cache, baseURL, model, apiKey, expectedJson] = process.argv.slice(2);
const require = createRequire(cache + '/package.json');
const OpenAI = require('openai');
const expected = JSON.parse(expectedJson);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });

function check(ok, what) {
  if (!ok) {
    console.error('failed: ' + what);
    process.exit(1);
  }
}

// completions, greedy: the CLI's text
const c = await client.completions.create({ model, prompt: expected.prompt, max_tokens: expected.max_tokens, temperature: 0 });
check(c.choices[0].text === expected.text, 'completions text ' + JSON.stringify(c.choices[0].text));
check(c.usage.completion_tokens === expected.max_tokens, 'usage.completion_tokens');
check(Array.isArray(c.choices[0].looplm.steps), 'looplm.steps');

// streaming completions: the same text, chunk by chunk
const stream = await client.completions.create({ model, prompt: expected.prompt, max_tokens: expected.max_tokens, temperature: 0, stream: true });
let text = '', chunks = 0, finish = null, usage = null;
for await (const chunk of stream) {
  ++chunks;
  if (chunk.usage) usage = chunk.usage;
  for (const ch of chunk.choices) {
    text += ch.text ?? '';
    if (ch.finish_reason) finish = ch.finish_reason;
  }
}
check(text === expected.text, 'streamed text ' + JSON.stringify(text));
check(chunks > 2, 'more than one chunk');
check(finish === 'length', 'finish_reason ' + finish);
check(usage && usage.completion_tokens === expected.max_tokens, 'usage in the last chunk');

// chat, and a streamed chat
const chat = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Hello' }], max_tokens: 8, temperature: 0 });
check(chat.choices[0].message.role === 'assistant' && typeof chat.choices[0].message.content === 'string', 'chat message');
const chatStream = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Hello' }], max_tokens: 8, temperature: 0, stream: true });
let chatText = '';
for await (const chunk of chatStream) for (const ch of chunk.choices) chatText += ch.delta?.content ?? '';
check(chatText === chat.choices[0].message.content, 'streamed chat = chat');

// models
const models = await client.models.list();
check(models.data.length === 1 && models.data[0].id === model, 'models');

// an error: the client raises the server's OpenAI-style error with its status
let status = 0, message = '';
try {
  await client.completions.create({ model: 'no-such-model', prompt: 'x', max_tokens: 2 });
} catch (e) {
  status = e.status;
  message = e.error?.message ?? e.message;
}
check(status === 400 && message.includes('does not exist'), 'error for an unknown model: ' + status + ' ' + message);
let authStatus = 0;
try {
  await new OpenAI({ baseURL, apiKey: 'wrong', maxRetries: 0 }).completions.create({ model, prompt: 'x', max_tokens: 2 });
} catch (e) {
  authStatus = e.status;
}
check(authStatus === 401, 'a wrong key: ' + authStatus);

console.log(JSON.stringify({ ok: true, chunks, chat: chat.choices[0].message.content }));
