// The official OpenAI Node client, unchanged, against `inflight serve` on stories260K: the model list, a
// completion, a streamed completion, a chat completion (plain, streamed, with tools and
// chat_template_kwargs), structured output (response_format with a JSON schema, validated by ajv; the
// client's own chat.completions.parse with a zod schema), and API errors (a chat template refusing a
// conversation among them).
// Tool calls go to a second server on the ChatML template, which renders tool messages.
// Usage: node openai_client_check.mjs <base URL, e.g. http://127.0.0.1:8000/v1> <api key> <ChatML server's base URL>
import assert from 'node:assert/strict';
import Ajv from 'ajv';
import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { z } from 'zod';

const [baseURL, apiKey, chatmlURL] = process.argv.slice(2);
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

// Tools and chat_template_kwargs (vLLM's field, sent as an extra body parameter) reach the chat template;
// stories260K has none, so the built-in llama2 template renders, and refuses a tool message with a 400.
const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }];
const withTools = await client.chat.completions.create({ model, messages, tools, tool_choice: 'auto', max_tokens: 12, temperature: 0,
                                                        chat_template_kwargs: { enable_thinking: false } });
assert.equal(withTools.choices[0].message.content, reply.content);  // llama2 ignores tools: the same prompt
await assert.rejects(
  client.chat.completions.create({ model, tools, max_tokens: 4, messages: [
    ...messages,
    { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
    { role: 'tool', tool_call_id: 'c1', content: '22 C' }] }),
  (err) => err instanceof OpenAI.BadRequestError && err.param === 'messages' && /llama2 chat template/.test(err.message));

// Structured output: every answer that stops is JSON that ajv finds valid against the schema.
const schema = {
  type: 'object',
  properties: {
    title: { type: 'string', minLength: 1, maxLength: 16 },
    stars: { type: 'integer', minimum: 1, maximum: 5 },
    mood: { enum: ['happy', 'sad'] },
    words: { type: 'array', items: { type: 'string', maxLength: 8 }, minItems: 1, maxItems: 3 },
  },
  required: ['title', 'stars', 'mood', 'words'],
  additionalProperties: false,
};
const validate = new Ajv({ strict: true }).compile(schema);
let stopped = 0;
for (let seed = 0; seed < 8; seed++) {
  const r = await client.chat.completions.create({ model, messages, max_tokens: 100, temperature: 1, seed,
    response_format: { type: 'json_schema', json_schema: { name: 'review', schema, strict: true } } });
  if (r.choices[0].finish_reason !== 'stop') continue;
  stopped++;
  const value = JSON.parse(r.choices[0].message.content);
  assert.ok(validate(value), `${r.choices[0].message.content}: ${JSON.stringify(validate.errors)}`);
}
assert.ok(stopped >= 6, `only ${stopped} of 8 structured answers stopped`);

// The client's own helper: a zod schema to response_format, and the answer parsed back into a typed object.
const Review = z.object({ title: z.string().max(16), stars: z.number().int().min(1).max(5), happy: z.boolean() });
const parsed = await client.chat.completions.parse({ model, messages, max_tokens: 60, temperature: 0.7, seed: 3,
                                                     response_format: zodResponseFormat(Review, 'review') });
const review = parsed.choices[0].message.parsed;
assert.equal(parsed.choices[0].finish_reason, 'stop');
assert.ok(Review.safeParse(review).success, JSON.stringify(review));

// json_object: any object; an unsupported keyword is a 400 naming it.
const object = await client.chat.completions.create({ model, messages, max_tokens: 40, temperature: 0,
                                                      response_format: { type: 'json_object' } });
assert.ok(object.choices[0].message.content.startsWith('{'));
await assert.rejects(
  client.chat.completions.create({ model, messages, max_tokens: 4,
    response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', patternProperties: { a: {} } } } } }),
  (err) => err instanceof OpenAI.BadRequestError && /patternProperties/.test(err.message));

// Tool calls: required, named and streamed through the client's own stream helper, then a turn that returns the
// tool's result. The arguments must fit the tool's parameters.
const toolClient = new OpenAI({ baseURL: chatmlURL, apiKey, maxRetries: 0, timeout: 60_000 });
const weather = { type: 'function', function: { name: 'get_weather', parameters: {
  type: 'object', properties: { city: { type: 'string', maxLength: 12 }, days: { type: 'integer', minimum: 1, maximum: 7 } },
  required: ['city', 'days'], additionalProperties: false } } };
const time = { type: 'function', function: { name: 'get_time', parameters: {
  type: 'object', properties: { zone: { enum: ['UTC', 'CET'] } }, required: ['zone'], additionalProperties: false } } };
const validateWeather = new Ajv({ strict: true }).compile(weather.function.parameters);
const ask = [{ role: 'user', content: 'What is the weather in Paris?' }];
for (const tool_choice of ['required', { type: 'function', function: { name: 'get_weather' } }]) {
  for (let seed = 0; seed < 3; seed++) {
    const r = await toolClient.chat.completions.create({ model, messages: ask, tools: [weather, time], tool_choice,
                                                         parallel_tool_calls: false, max_tokens: 200, temperature: 1, seed });
    const choice = r.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(choice));
    assert.equal(choice.message.tool_calls.length, 1);
    const call = choice.message.tool_calls[0];
    assert.equal(call.type, 'function');
    assert.ok(call.id.length > 0);
    if (typeof tool_choice === 'object') assert.equal(call.function.name, 'get_weather');
    if (call.function.name === 'get_weather') {
      const args = JSON.parse(call.function.arguments);
      assert.ok(validateWeather(args), `${call.function.arguments}: ${JSON.stringify(validateWeather.errors)}`);
    }
  }
}
const named = { model, messages: ask, tools: [weather, time], tool_choice: { type: 'function', function: { name: 'get_weather' } },
                max_tokens: 200, temperature: 1, seed: 4 };
const whole = await toolClient.chat.completions.create(named);
const runner = toolClient.chat.completions.stream(named);
const streamedCalls = (await runner.finalChatCompletion()).choices[0].message.tool_calls;
assert.equal(streamedCalls.length, whole.choices[0].message.tool_calls.length);
assert.equal(streamedCalls[0].function.name, 'get_weather');
assert.deepEqual(JSON.parse(streamedCalls[0].function.arguments), JSON.parse(whole.choices[0].message.tool_calls[0].function.arguments));
// The tool's result goes back, and the model answers in text.
const call = whole.choices[0].message.tool_calls[0];
const followUp = await toolClient.chat.completions.create({ model, tools: [weather, time], max_tokens: 16, temperature: 0,
  messages: [...ask, { role: 'assistant', content: null, tool_calls: [call] },
             { role: 'tool', tool_call_id: call.id, content: '22 C and sunny' }] });
assert.equal(typeof followUp.choices[0].message.content, 'string');
await assert.rejects(toolClient.chat.completions.create({ ...named, tool_choice: { type: 'function', function: { name: 'nope' } } }),
                     (err) => err instanceof OpenAI.BadRequestError && err.param === 'tool_choice');

await assert.rejects(client.completions.create({ model: 'gpt-4', prompt: 'x', max_tokens: 1 }),
                     (err) => err instanceof OpenAI.NotFoundError && err.code === 'model_not_found');
await assert.rejects(client.completions.create({ model, prompt: 'x', temperature: 9 }),
                     (err) => err instanceof OpenAI.BadRequestError && err.param === 'temperature');

console.log(`openai client: completion, streamed completion, chat completion (plain, streamed, with tools), ` +
            `structured output (${stopped} of 8 schema answers stopped, all valid; zod parse), ` +
            `tool calls (required, named, streamed through the client's helper, a tool result turn), errors: ok`);
