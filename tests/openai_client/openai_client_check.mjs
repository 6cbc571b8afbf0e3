// The official OpenAI Node client, unchanged, against `inflight serve` on stories260K: the model list, a
// completion, a streamed completion, a chat completion (plain and streamed), and an API error.
// Usage: node openai_client_check.mjs <base URL, e.g. http://127.0.0.1:8000/v1> <api key>
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });

const models = await client.models.list();
const model = models.data[0].id;
assert.equal(model, 'stories260K');

// Greedy continuation of the golden prompt (run.c's output starts the same way).
const completion = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 16, temperature: 0 });
const text = completion.choices[0].text;
assert.ok(text.startsWith(', there was a little girl named Lily.'), `completion text: ${JSON.stringify(text)}`);
assert.equal(completion.choices[0].finish_reason, 'length');
assert.equal(completion.usage.completion_tokens, 16);

let streamed = '';
let finish = null;
const stream = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 16, temperature: 0, stream: true });
for await (const chunk of stream) {
  streamed += chunk.choices[0]?.text ?? '';
  finish = chunk.choices[0]?.finish_reason ?? finish;
}
assert.equal(streamed, text);
assert.equal(finish, 'length');

const messages = [{ role: 'system', content: 'Tell a story.' }, { role: 'user', content: 'The cat' }];
const chat = await client.chat.completions.create({ model, messages, max_tokens: 12, temperature: 0 });
const reply = chat.choices[0].message;
assert.equal(reply.role, 'assistant');
assert.ok(reply.content.length > 0);
assert.ok(chat.usage.prompt_tokens > 0);

let chatStreamed = '';
const chatStream = await client.chat.completions.create({ model, messages, max_tokens: 12, temperature: 0, stream: true,
                                                          stream_options: { include_usage: true } });
let usage = null;
for await (const chunk of chatStream) {
  chatStreamed += chunk.choices[0]?.delta?.content ?? '';
  usage = chunk.usage ?? usage;
}
assert.equal(chatStreamed, reply.content);
assert.equal(usage.completion_tokens, 12);

await assert.rejects(client.completions.create({ model: 'gpt-4', prompt: 'x', max_tokens: 1 }),
                     (err) => err instanceof OpenAI.NotFoundError && err.code === 'model_not_found');
await assert.rejects(client.completions.create({ model, prompt: 'x', temperature: 9 }),
                     (err) => err instanceof OpenAI.BadRequestError && err.param === 'temperature');

console.log(`openai client: completion, streamed completion, chat completion (plain and streamed), errors: ok`);
