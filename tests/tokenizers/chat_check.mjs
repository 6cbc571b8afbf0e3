// Models made with `inflight make-model --tokenizer` from the real Llama 3 and Qwen 3 tokenizers (a Hugging
// Face folder and a GGUF each) are served, and the official `openai` client chats with them through the
// model's own chat template: the prompt has the template's special tokens (as /tokenize shows), streamed
// and whole answers agree, and the usage counts match /tokenize.
// Usage: node chat_check.mjs <inflight> <work dir>
import { spawnSync } from "node:child_process";
import path from "node:path";
import OpenAI from "openai";

import { fail, modelsDir, serve } from "./serve_model.mjs";

const [inflight, work] = process.argv.slice(2);

for (const name of ["llama3", "qwen3"]) {
  for (const format of ["hf", "gguf"]) {
    const out = path.join(work, `tiny-${name}${format === "gguf" ? ".gguf" : ""}`);
    const made = spawnSync(inflight, ["make-model", "--preset", "tiny", "--layers", "1", "--dtype", "f16",
                                      "--tokenizer", modelsDir(name), "--format", format, "-o", out], { encoding: "utf8" });
    if (made.status !== 0) {
      fail(`make-model ${name} ${format}: ${made.stdout}${made.stderr}`);
      continue;
    }
    const server = await serve(inflight, out);
    try {
      const base = `http://127.0.0.1:${server.port}`;
      const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused" });
      const messages = [
        { role: "system", content: "You are a helpful assistant." },
        { role: "user", content: "Write a haiku about tokenizers." },
      ];
      const tokenized = await (await fetch(`${base}/tokenize`, {
        method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ messages, return_token_strs: true }),
      })).json();
      const strs = tokenized.token_strs ?? [];
      const marker = name === "llama3" ? "<|start_header_id|>" : "<|im_start|>";
      if (!strs.includes(marker)) fail(`${name} ${format}: the prompt lacks the template's ${marker}: ${JSON.stringify(strs.slice(0, 8))}`);
      const models = await client.models.list();
      const model = models.data[0].id;
      const whole = await client.chat.completions.create({ model, messages, max_tokens: 12, temperature: 0 });
      const text = whole.choices[0].message.content;
      if (typeof text !== "string") fail(`${name} ${format}: no content`);
      if (whole.usage.prompt_tokens !== tokenized.count)
        fail(`${name} ${format}: usage.prompt_tokens ${whole.usage.prompt_tokens} != /tokenize count ${tokenized.count}`);
      const stream = await client.chat.completions.create({ model, messages, max_tokens: 12, temperature: 0, stream: true });
      let streamed = "";
      for await (const chunk of stream) streamed += chunk.choices[0]?.delta?.content ?? "";
      if (streamed !== text) fail(`${name} ${format}: streamed ${JSON.stringify(streamed)} != whole ${JSON.stringify(text)}`);
      console.log(`${name} ${format}: ${tokenized.count} prompt tokens (${strs.slice(0, 3).join(" ")} ...), ` +
                  `answer ${JSON.stringify(text)} (${whole.usage.completion_tokens} tokens, ${whole.choices[0].finish_reason})`);
    } catch (e) {
      fail(`${name} ${format}: ${e.stack}\n${server.log()}`);
    } finally {
      server.child.kill("SIGTERM");
    }
  }
}
