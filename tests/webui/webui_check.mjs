// The built-in web page in a real browser (Debian's chromium via playwright-core) against `inflight serve`
// on stories260K: a greedy chat answer streams and equals the API's; Stop cancels (the server's /metrics
// count it); the server view shows blocks in use and generation steps during a long generation, and 0
// after; API errors (400, 401, 429, 503) in words; with --api-key the page fails without the key and works with it; a
// screenshot of each view, light and dark, wide and narrow.
// Usage: node webui_check.mjs <inflight binary> <stories260K.gguf> <screenshot dir> <chromium>
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const [inflight, model, shots, chromiumPath] = process.argv.slice(2);
const API_KEY = 'webui-test-key-58d2';
const servers = [];

// `inflight serve` on a free port; resolves once it is ready (or, with ready false, listening). A slow
// step (test hook) keeps long generations long enough to press Stop and to watch them.
function startServer(extraArgs, { env = {}, ready = true } = {}) {
  const args = ['serve', '--model', model, '--host', '127.0.0.1', '--port', '0', '--kv-cache-memory', '64M', ...extraArgs];
  const proc = spawn(inflight, args, { env: { ...process.env, INFLIGHT_DEBUG_STEP_DELAY_MS: '8', ...env } });
  const server = { proc, log: '', port: 0 };
  servers.push(server);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`inflight serve did not become ready:\n${server.log}`)), 60_000);
    const onData = (data) => {
      server.log += data.toString();
      const m = server.log.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) server.port = Number(m[1]);
      if (server.port && !server.base && (!ready || server.log.includes('ready: serving'))) {
        clearTimeout(timer);
        server.base = `http://127.0.0.1:${server.port}`;
        resolve(server);
      }
    };
    proc.stdout.on('data', onData);
    proc.stderr.on('data', onData);
    proc.on('exit', (code) => reject(new Error(`inflight serve exited (${code}) at start-up:\n${server.log}`)));
  });
}

async function metrics(base) {
  const text = await (await fetch(`${base}/metrics`)).text();
  const value = (pattern) => Number(text.match(pattern)?.[1] ?? NaN);
  return {
    cancelled: value(/^inflight_requests_total\{finish_reason="cancelled"\} (\S+)$/m),
    blocksUsed: value(/^inflight_kv_cache_blocks_used (\S+)$/m),
    running: value(/^inflight_num_requests_running (\S+)$/m),
    waiting: value(/^inflight_num_requests_waiting (\S+)$/m),
  };
}

async function waitFor(what, predicate, timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await predicate();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

// Waits until an answer's stream has ended (the page marks it data-done).
const waitDone = (answer, timeoutMs = 30_000) =>
  waitFor('the end of the answer', async () => (await answer.getAttribute('data-done')) === 'true', timeoutMs);

const num = async (page, id) => Number(await page.locator(`#${id}`).textContent());

async function setSettings(page, { mode = 'chat', temperature, topP, maxTokens, seed = '', ignoreEos = false, system = '' }) {
  await page.locator(mode === 'chat' ? '#mode-chat' : '#mode-completion').check();
  await page.locator('#temperature').fill(String(temperature));
  await page.locator('#top-p').fill(String(topP));
  await page.locator('#max-tokens').fill(String(maxTokens));
  await page.locator('#seed').fill(String(seed));
  await page.locator('#system-prompt').fill(system);
  await page.locator('#ignore-eos').setChecked(ignoreEos);
}

// Sends `text` from the message box with the keyboard; returns the answer's list item.
async function sendMessage(page, text) {
  const before = await page.locator('.message.assistant, .message.completion').count();
  await page.locator('#prompt').fill(text);
  await page.locator('#prompt').press('Enter');
  const answer = page.locator('.message.assistant, .message.completion').nth(before);
  await answer.waitFor();
  return answer;
}

function watchPage(page, problems) {
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error' && !/status of (400|401|429|503)/.test(m.text())) problems.push(`console error: ${m.text()}`);
  });
}

const userDataDir = mkdtempSync(join(tmpdir(), 'inflight-webui-'));
let context;
let failed = false;
try {
  const [open, keyed] = await Promise.all([startServer([]), startServer(['--api-key', API_KEY])]);
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: chromiumPath,
    headless: true,
    viewport: { width: 1200, height: 900 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const problems = [];
  const page = context.pages()[0] ?? await context.newPage();
  watchPage(page, problems);

  // 1. A greedy chat answer streams, and its text equals the API's for the same conversation.
  await page.goto(`${open.base}/`);
  assert.equal(await page.title(), 'inflight');
  await waitFor('the model name', async () => (await page.locator('#model-badge').textContent()) === 'stories260K');
  await setSettings(page, { temperature: 0, topP: 1, maxTokens: 48 });
  const question = 'Tell me a story about a cat.';
  const answer = await sendMessage(page, question);
  await waitDone(answer, 30_000);
  const shown = await answer.locator('.content').textContent();
  const chunks = Number(await answer.getAttribute('data-chunks'));
  const stats = await answer.locator('.stats').textContent();
  const api = await (await fetch(`${open.base}/v1/chat/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: 'stories260K', messages: [{ role: 'user', content: question }], temperature: 0,
                           top_p: 1, max_tokens: 48 }),
  })).json();
  assert.ok(shown.length > 0, 'the answer is empty');
  assert.equal(shown, api.choices[0].message.content, 'the page shows the greedy answer of the API');
  assert.ok(chunks > 1, `the answer came in ${chunks} piece(s), not as a stream`);
  assert.match(stats, /TTFT \d+ ms/);
  assert.match(stats, /[\d.]+ tok\/s/);
  assert.ok(stats.includes(`${api.usage.completion_tokens} tokens`), stats);
  assert.ok(stats.includes(`finish: ${api.choices[0].finish_reason}`), stats);
  console.log(`ok: greedy chat streamed in ${chunks} pieces, equals the API (${stats})`);
  await page.screenshot({ path: join(shots, 'chat-light.png'), fullPage: true });
  await page.emulateMedia({ colorScheme: 'dark' });
  await page.screenshot({ path: join(shots, 'chat-dark.png'), fullPage: true });
  await page.emulateMedia({ colorScheme: 'light' });

  // 2. Stop, pressed mid-stream, cancels the request: /metrics count it and the blocks are free.
  const before = await metrics(open.base);
  await page.locator('#clear').click();
  await setSettings(page, { temperature: 0.8, topP: 0.95, maxTokens: 400, ignoreEos: true });
  const long = await sendMessage(page, 'Tell me a very long story.');
  await waitFor('a few streamed tokens', async () => Number(await long.getAttribute('data-chunks')) >= 3);
  await page.locator('#stop').click();
  await waitDone(long);
  assert.equal(await long.getAttribute('data-finish'), 'cancelled');
  assert.match(await long.locator('.stats').textContent(), /finish: stopped/);
  const stoppedAt = Number(await long.getAttribute('data-chunks'));
  assert.ok(stoppedAt < 400, `the stream ran to the end (${stoppedAt} tokens)`);
  const after = await waitFor('the cancellation in /metrics', async () => {
    const m = await metrics(open.base);
    return m.cancelled > before.cancelled && m.blocksUsed === 0 && m.running === 0 ? m : null;
  });
  assert.equal(await page.locator('#send').isDisabled(), false);
  console.log(`ok: Stop after ${stoppedAt} tokens; inflight_requests_total{cancelled} ${before.cancelled} -> ${after.cancelled}`);

  // 3. API errors in words.
  await setSettings(page, { temperature: 5, topP: 1, maxTokens: 8 });
  await page.locator('#prompt').fill('Hello');
  await page.locator('#send').click();
  const error = page.locator('#chat-error');
  await error.waitFor({ state: 'visible' });
  const words = await error.textContent();
  assert.match(words, /^HTTP 400 Bad request: .*temperature/);
  assert.equal(await page.locator('#prompt').inputValue(), 'Hello', 'a failed message goes back to the box');
  console.log(`ok: a 400 in words: "${words}"`);

  // 4. The server view during a long generation (raw completion, ignore_eos), then after it ends.
  await page.locator('#clear').click();
  await setSettings(page, { mode: 'completion', temperature: 0, topP: 1, maxTokens: 300, ignoreEos: true });
  const completion = await sendMessage(page, 'Once upon a time');
  await waitFor('streamed tokens', async () => Number(await completion.getAttribute('data-chunks')) >= 2);
  await page.locator('#tab-server').click();
  assert.equal(await page.locator('#view-chat').isHidden(), true);
  await waitFor('blocks in use and generation steps in the server view', async () =>
    await num(page, 'kv-used') > 0 && await num(page, 'last-generation') > 0 && await num(page, 'stat-running') === 1);
  assert.equal(await page.locator('#info-model').textContent(), 'stories260K');
  assert.equal(await page.locator('#info-device').textContent(), 'cpu');
  assert.equal(await page.locator('#info-dtype').textContent(), 'f16');
  assert.ok(await num(page, 'kv-total') >= await num(page, 'kv-used'));
  assert.ok(await num(page, 'stat-gen-tps') > 0);
  const newest = page.locator('#step-table tbody tr').first().locator('td');
  assert.equal(Number(await newest.nth(2).textContent()), 1, 'the newest step generates one token');
  const busyUsed = await num(page, 'kv-used');
  await page.screenshot({ path: join(shots, 'server-light.png'), fullPage: true });
  await page.emulateMedia({ colorScheme: 'dark' });
  await page.screenshot({ path: join(shots, 'server-dark.png'), fullPage: true });
  await page.emulateMedia({ colorScheme: 'light' });
  await waitDone(completion, 60_000);
  assert.equal(await completion.getAttribute('data-finish'), 'length');
  await waitFor('the server view back at 0', async () =>
    await num(page, 'kv-used') === 0 && await num(page, 'stat-running') === 0 && await num(page, 'last-generation') === 0
    && await num(page, 'last-context') === 0);
  await page.screenshot({ path: join(shots, 'server-idle-light.png'), fullPage: true });
  console.log(`ok: server view: ${busyUsed} blocks in use and generation steps during the completion, 0 after`);

  // 5. A narrow window, and the tabs from the keyboard.
  await page.setViewportSize({ width: 380, height: 800 });
  await page.locator('#tab-server').focus();
  await page.keyboard.press('ArrowLeft');
  assert.equal(await page.locator('#view-chat').isVisible(), true);
  assert.equal(await page.evaluate(() => document.activeElement.id), 'tab-chat');
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
  assert.ok(overflow <= 0, `the page scrolls sideways by ${overflow} px at 380 px`);
  await page.screenshot({ path: join(shots, 'chat-narrow-light.png'), fullPage: true });
  await page.keyboard.press('ArrowRight');
  assert.equal(await page.locator('#view-server').isVisible(), true);
  await page.emulateMedia({ colorScheme: 'dark' });
  await page.screenshot({ path: join(shots, 'server-narrow-dark.png'), fullPage: true });
  console.log('ok: narrow window, keyboard tabs');

  // 6. With --api-key: without the key a 401 in words, with it the chat works. A new tab starts keyless.
  const keyPage = await context.newPage();
  watchPage(keyPage, problems);
  await keyPage.goto(`${keyed.base}/`);
  await keyPage.locator('#key-panel').waitFor({ state: 'visible' });
  await setSettings(keyPage, { temperature: 0, topP: 1, maxTokens: 16 });
  await keyPage.locator('#prompt').fill('Hi there');
  await keyPage.locator('#send').click();
  await keyPage.locator('#chat-error').waitFor({ state: 'visible' });
  const unauthorized = await keyPage.locator('#chat-error').textContent();
  assert.match(unauthorized, /^HTTP 401 Unauthorized: missing or incorrect API key/);
  assert.equal(await keyPage.locator('.message.assistant').count(), 0);
  await keyPage.locator('#api-key').fill(API_KEY);
  await keyPage.locator('#api-key').press('Enter');
  await waitFor('the model name with the key', async () => (await keyPage.locator('#model-badge').textContent()) === 'stories260K');
  assert.equal(await keyPage.locator('#key-panel').isHidden(), true);
  assert.equal(await keyPage.locator('#prompt').inputValue(), 'Hi there');
  await keyPage.locator('#send').click();
  const keyed1 = keyPage.locator('.message.assistant').first();
  await waitDone(keyed1, 30_000);
  assert.ok((await keyed1.locator('.content').textContent()).length > 0);
  await keyPage.locator('#tab-server').click();
  await waitFor('the server view with the key', async () => (await keyPage.locator('#info-model').textContent()) === 'stories260K');
  assert.equal(await keyPage.locator('#server-error').isHidden(), true);
  assert.equal(await keyPage.evaluate(() => sessionStorage.getItem('inflight-api-key')), API_KEY);
  console.log(`ok: --api-key: "${unauthorized}" without the key; chat and server view with it`);

  // 7. 503 while the model loads and 429 when the queue is full, in words.
  const slow = await startServer(['--max-num-seqs', '1', '--max-queue', '1'],
                                 { env: { INFLIGHT_DEBUG_LOAD_DELAY_MS: '8000' }, ready: false });
  const busyPage = await context.newPage();
  watchPage(busyPage, problems);
  await busyPage.goto(`${slow.base}/`);
  await waitFor('the 503 in the model badge', async () =>
    /^HTTP 503 Service unavailable: the model is loading/.test(await busyPage.locator('#model-badge').textContent()));
  await setSettings(busyPage, { temperature: 0, topP: 1, maxTokens: 8 });
  await busyPage.locator('#prompt').fill('Hello');
  await busyPage.locator('#send').click();
  await busyPage.locator('#chat-error').waitFor({ state: 'visible' });
  const loading = await busyPage.locator('#chat-error').textContent();
  assert.match(loading, /^HTTP 503 Service unavailable: the model is loading.*\(retry in 1 s\)$/);
  await waitFor('the slow server to be ready', async () => slow.log.includes('ready: serving'), 30_000);
  // One request running and one waiting fill --max-queue 1.
  const hold = new AbortController();
  const longRequest = () => fetch(`${slow.base}/v1/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, signal: hold.signal,
    body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 400, ignore_eos: true, stream: true }),
  }).then((r) => r.arrayBuffer()).catch(() => {});
  const held = [longRequest()];
  await waitFor('one running request', async () => (await metrics(slow.base)).running === 1);
  held.push(longRequest());
  await waitFor('one waiting request', async () => (await metrics(slow.base)).waiting === 1);
  await busyPage.locator('#send').click();
  await waitFor('the 429 in words', async () => /^HTTP 429/.test(await busyPage.locator('#chat-error').textContent()));
  const full = await busyPage.locator('#chat-error').textContent();
  assert.match(full, /^HTTP 429 Too many requests: the waiting queue is full.*\(retry in 1 s\)$/);
  hold.abort();
  await Promise.all(held);
  console.log(`ok: "${loading}" while loading; "${full}" with a full queue`);

  assert.deepEqual(problems, [], 'no script errors');
  console.log(`webui: greedy chat, stop, errors, server view, narrow + keyboard, API key, 503 and 429: ok (screenshots in ${shots})`);
} catch (e) {
  failed = true;
  console.error(e);
  for (const s of servers) console.error(`--- server log (port ${s.port}) ---\n${s.log.slice(-4000)}`);
} finally {
  if (context) await context.close().catch(() => {});
  for (const s of servers) s.proc.kill('SIGKILL');
  rmSync(userDataDir, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
