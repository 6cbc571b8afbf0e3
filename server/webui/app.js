// The built-in web page: chat (or a raw completion) streamed over SSE from this server, and the live
// server view polled from /v1/status. Plain JavaScript, no dependencies; every URL is relative to the page.

const $ = (id) => document.getElementById(id);
const KEY_STORAGE = 'inflight-api-key';
const STATUS_INTERVAL_MS = 250;

const state = {
  apiKey: sessionStorage.getItem(KEY_STORAGE) || '',
  model: null,
  messages: [],        // the conversation so far: {role, content}
  controller: null,    // AbortController of the stream in flight
  statusTimer: null,
  statusInFlight: false,
  lastStatus: null,    // redrawn when the colour scheme changes
};

// ---- HTTP ---------------------------------------------------------------------------------------

const STATUS_WORDS = {
  400: 'Bad request', 401: 'Unauthorized', 403: 'Forbidden', 404: 'Not found', 405: 'Method not allowed',
  413: 'Request too large', 429: 'Too many requests', 431: 'Headers too large', 500: 'Server error',
  503: 'Service unavailable',
};

function authHeaders(extra = {}) {
  const h = { ...extra };
  if (state.apiKey) h.Authorization = `Bearer ${state.apiKey}`;
  return h;
}

// An API error in words: "HTTP 429 Too many requests: the waiting queue is full … (retry in 1 s)".
async function describeError(res) {
  let message = '';
  try {
    const body = await res.json();
    message = body?.error?.message || '';
  } catch {
    message = '';
  }
  let text = `HTTP ${res.status} ${STATUS_WORDS[res.status] || res.statusText || 'error'}`;
  if (message) text += `: ${message}`;
  const retry = res.headers.get('Retry-After');
  if (retry && (res.status === 429 || res.status === 503)) text += ` (retry in ${retry} s)`;
  if (res.status === 401) text += '. Enter the server\'s API key above.';
  return text;
}

function needKey(reason) {
  $('key-panel').hidden = false;
  $('key-hint').dataset.reason = reason || '';
  $('api-key').focus();
}

async function loadModel() {
  try {
    const res = await fetch('v1/models', { headers: authHeaders() });
    if (res.status === 401) {
      $('model-badge').textContent = 'API key needed';
      needKey('models');
      return;
    }
    if (!res.ok) {
      $('model-badge').textContent = await describeError(res);
      return;
    }
    const body = await res.json();
    state.model = body.data?.[0]?.id ?? null;
    $('model-badge').textContent = state.model ?? '(no model)';
  } catch (e) {
    $('model-badge').textContent = `server unreachable (${e.message})`;
  }
}

// ---- Chat -----------------------------------------------------------------------------------------

function mode() {
  return $('mode-completion').checked ? 'completion' : 'chat';
}

function numberField(id) {
  const raw = $(id).value.trim();
  if (raw === '') return undefined;
  const v = Number(raw);
  return Number.isFinite(v) ? v : raw;  // the server names a bad value
}

function samplingParams() {
  const p = {
    temperature: numberField('temperature'),
    top_p: numberField('top-p'),
    max_tokens: numberField('max-tokens'),
    seed: numberField('seed'),
  };
  if ($('ignore-eos').checked) p.ignore_eos = true;
  for (const k of Object.keys(p)) if (p[k] === undefined) delete p[k];
  return p;
}

function addMessage(role, text) {
  const li = document.createElement('li');
  li.className = `message ${role}`;
  const who = document.createElement('div');
  who.className = 'role';
  who.textContent = role === 'user' ? 'You' : role === 'prompt' ? 'Prompt' : role === 'completion' ? 'Completion' : 'Assistant';
  const content = document.createElement('div');
  content.className = 'content';
  content.textContent = text;
  li.append(who, content);
  $('messages').append(li);
  li.scrollIntoView({ block: 'end' });
  return li;
}

function showChatError(text) {
  const el = $('chat-error');
  el.textContent = text;
  el.hidden = !text;
}

function setBusy(busy) {
  $('send').disabled = busy;
  $('stop').disabled = !busy;
}

function formatStats(s) {
  const parts = [];
  if (s.ttftMs !== null) parts.push(`TTFT ${s.ttftMs.toFixed(0)} ms`);
  if (s.tokensPerSecond !== null) parts.push(`${s.tokensPerSecond.toFixed(1)} tok/s`);
  parts.push(`${s.tokens} token${s.tokens === 1 ? '' : 's'}`);
  parts.push(`finish: ${s.finish}`);
  return parts.join(' · ');
}

// Reads `data:` events of a server-sent event stream; calls onEvent(json) for each until [DONE].
async function readEvents(body, onEvent) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const frame = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = frame.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trimStart()).join('\n');
        if (data === '[DONE]') return;
        if (data) onEvent(JSON.parse(data));
      }
    }
  } finally {
    reader.cancel().catch(() => {});  // a stream left early (an error event) closes its connection
  }
}

async function send() {
  const text = $('prompt').value;
  if (state.controller || text.trim() === '') return;
  showChatError('');
  const raw = mode() === 'completion';
  const params = samplingParams();
  const body = { ...params, stream: true, stream_options: { include_usage: true } };
  if (state.model) body.model = state.model;
  let url;
  let asked;  // the message's list item
  if (raw) {
    url = 'v1/completions';
    body.prompt = text;
    asked = addMessage('prompt', text);
  } else {
    url = 'v1/chat/completions';
    const system = $('system-prompt').value;
    const history = [...state.messages, { role: 'user', content: text }];
    body.messages = system.trim() ? [{ role: 'system', content: system }, ...history] : history;
    state.messages = history;
    asked = addMessage('user', text);
  }
  $('prompt').value = '';

  const li = addMessage(raw ? 'completion' : 'assistant', '');
  li.classList.add('streaming');
  li.setAttribute('aria-busy', 'true');  // screen readers read the answer once, when it is complete
  const content = li.querySelector('.content');
  const stats = document.createElement('p');
  stats.className = 'stats';
  li.append(stats);
  let answer = '';
  let chunks = 0;
  let finish = null;
  let usage = null;
  let firstAt = null;
  let lastAt = null;
  const startedAt = performance.now();
  const controller = new AbortController();
  state.controller = controller;
  setBusy(true);
  let stopped = false;
  let failed = false;
  try {
    const res = await fetch(url, {
      method: 'POST', headers: authHeaders({ 'Content-Type': 'application/json' }), body: JSON.stringify(body),
      signal: controller.signal,
    });
    if (!res.ok) {
      const words = await describeError(res);
      if (res.status === 401) needKey('chat');
      throw new Error(words);
    }
    await readEvents(res.body, (event) => {
      if (event.error) throw new Error(`the server stopped the answer: ${event.error.message}`);
      if (event.usage) usage = event.usage;
      const choice = event.choices?.[0];
      if (!choice) return;
      const piece = raw ? choice.text : choice.delta?.content;
      if (piece) {
        const now = performance.now();
        if (firstAt === null) firstAt = now;
        lastAt = now;
        answer += piece;
        chunks += 1;
        content.textContent = answer;
        li.dataset.chunks = String(chunks);
      }
      if (choice.finish_reason) finish = choice.finish_reason;
    });
  } catch (e) {
    if (e.name === 'AbortError') {
      stopped = true;
    } else {
      failed = true;
      showChatError(e.message.startsWith('HTTP') || e.message.startsWith('the server') ? e.message
                                                                                        : `Request failed: ${e.message}`);
    }
  } finally {
    state.controller = null;
    setBusy(false);
    li.classList.remove('streaming');
    li.removeAttribute('aria-busy');
  }
  if (failed && answer === '') {
    li.remove();
    asked.remove();
    if (!raw) state.messages.pop();
    $('prompt').value = text;
    return;
  }
  if (!raw) state.messages.push({ role: 'assistant', content: answer });
  const tokens = usage?.completion_tokens ?? chunks;
  const s = {
    ttftMs: firstAt === null ? null : firstAt - startedAt,
    tokensPerSecond: tokens > 1 && lastAt > firstAt ? (tokens - 1) / ((lastAt - firstAt) / 1000) : null,
    tokens,
    finish: stopped ? 'stopped (cancelled)' : finish ?? 'none',
  };
  stats.textContent = formatStats(s);
  li.dataset.finish = stopped ? 'cancelled' : finish ?? '';
  li.dataset.done = 'true';
}

function stop() {
  if (state.controller) state.controller.abort();
}

function newConversation() {
  stop();
  state.messages = [];
  $('messages').replaceChildren();
  showChatError('');
  $('prompt').focus();
}

// ---- Server view -----------------------------------------------------------------------------------

function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

// Sizes a canvas' backing store to its CSS width (and the given CSS height) at the device pixel ratio.
function fitCanvas(canvas, cssHeight) {
  const ratio = window.devicePixelRatio || 1;
  const width = Math.max(100, canvas.clientWidth);
  canvas.style.height = `${cssHeight}px`;
  canvas.width = Math.round(width * ratio);
  canvas.height = Math.round(cssHeight * ratio);
  const ctx = canvas.getContext('2d');
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  return { ctx, width, height: cssHeight };
}

function drawBlockMap(states) {
  const canvas = $('block-map');
  const n = states.length;
  const width = Math.max(100, canvas.clientWidth);
  // Square cells, as large as fits: at most 16 px, at least 2 px, in at most ~240 px of height.
  let cell = 16;
  while (cell > 2 && Math.ceil(n / Math.floor(width / cell)) * cell > 240) cell -= 1;
  const cols = Math.max(1, Math.floor(width / cell));
  const rows = Math.max(1, Math.ceil(n / cols));
  const { ctx } = fitCanvas(canvas, rows * cell);
  const colors = [cssVar('--block-free'), cssVar('--block-used'), cssVar('--block-cached'), cssVar('--block-shared')];
  const gap = cell >= 6 ? 1 : 0;
  for (let i = 0; i < n; ++i) {
    ctx.fillStyle = colors[states.charCodeAt(i) - 48] || colors[0];
    ctx.fillRect((i % cols) * cell, Math.floor(i / cols) * cell, cell - gap, cell - gap);
  }
}

function drawStepChart(steps) {
  const { ctx, width, height } = fitCanvas($('step-chart'), 160);
  ctx.clearRect(0, 0, width, height);
  if (steps.length === 0) return;
  const maxTokens = Math.max(1, ...steps.map((s) => s.context_tokens + s.generation_tokens));
  const maxMs = Math.max(0.001, ...steps.map((s) => s.duration_ms));
  const bar = width / Math.max(64, steps.length);
  const base = width - bar * steps.length;  // newest step at the right edge
  const top = 6;
  const scale = (height - top) / maxTokens;
  steps.forEach((s, i) => {
    const x = base + i * bar;
    const hg = s.generation_tokens * scale;
    const hc = s.context_tokens * scale;
    ctx.fillStyle = cssVar('--chart-generation');
    ctx.fillRect(x, height - hg, Math.max(1, bar - 1), hg);
    ctx.fillStyle = cssVar('--chart-context');
    ctx.fillRect(x, height - hg - hc, Math.max(1, bar - 1), hc);
  });
  ctx.strokeStyle = cssVar('--chart-time');
  ctx.lineWidth = 1.5;
  ctx.beginPath();
  steps.forEach((s, i) => {
    const x = base + i * bar + bar / 2;
    const y = height - (s.duration_ms / maxMs) * (height - top);
    if (i === 0) ctx.moveTo(x, y);
    else ctx.lineTo(x, y);
  });
  ctx.stroke();
  ctx.fillStyle = cssVar('--muted');
  ctx.font = '11px system-ui, sans-serif';
  ctx.fillText(`max ${maxTokens} token${maxTokens === 1 ? '' : 's'} · ${maxMs.toFixed(2)} ms`, 6, 14);
}

function setText(id, value) {
  const el = $(id);
  const text = String(value);
  if (el.textContent !== text) el.textContent = text;
}

function renderStatus(s) {
  setText('info-model', s.model);
  setText('info-device', s.device);
  setText('info-dtype', s.kv_cache_dtype);
  setText('info-block', `${s.kv_block_size} tokens`);
  setText('stat-running', s.requests.running);
  setText('stat-waiting', s.requests.waiting);
  setText('stat-preemptions', s.counters.preemptions);
  const q = s.counters.prefix_cache_queries;
  const hits = s.counters.prefix_cache_hits;
  setText('stat-prefix', q > 0 ? `${hits} tokens (${((100 * hits) / q).toFixed(0)} %)` : `${hits} tokens`);
  setText('stat-gen-tps', s.throughput.generation_tokens_per_second.toFixed(1));
  setText('stat-prompt-tps', s.throughput.prompt_tokens_per_second.toFixed(1));
  setText('stat-steps-ps', s.throughput.steps_per_second.toFixed(1));
  setText('stat-steps', s.counters.steps);

  const kv = s.kv_cache;
  setText('kv-used', kv.blocks_used);
  setText('kv-total', kv.blocks_total);
  setText('kv-usage', (100 * kv.usage).toFixed(1));
  setText('kv-shared', kv.blocks_shared);
  setText('kv-cached', kv.blocks_cached);
  setText('kv-free', kv.blocks_free);
  $('kv-meter').value = kv.usage;
  $('block-map').setAttribute('aria-label', `KV cache block map: ${kv.blocks_used} of ${kv.blocks_total} blocks in use, `
    + `${kv.blocks_shared} shared, ${kv.blocks_cached} cached prefix, ${kv.blocks_free} free`);
  drawBlockMap(kv.block_states);

  setText('last-steps', s.last_second.steps);
  setText('last-context', s.last_second.context_tokens);
  setText('last-generation', s.last_second.generation_tokens);
  drawStepChart(s.steps);
  const rows = s.steps.slice(-12).reverse().map((st) => {
    const tr = document.createElement('tr');
    for (const v of [st.step, st.context_tokens, st.generation_tokens, st.context_seqs + st.generation_seqs,
                     st.kv_blocks_used, st.duration_ms.toFixed(2)]) {
      const td = document.createElement('td');
      td.textContent = String(v);
      tr.append(td);
    }
    return tr;
  });
  $('step-table').tBodies[0].replaceChildren(...rows);
}

function showServerError(text) {
  const el = $('server-error');
  el.textContent = text;
  el.hidden = !text;
}

async function pollStatus() {
  if (state.statusInFlight) return;
  state.statusInFlight = true;
  try {
    const res = await fetch('v1/status', { headers: authHeaders(), cache: 'no-store' });
    if (!res.ok) {
      if (res.status === 401) needKey('status');
      showServerError(await describeError(res));
      return;
    }
    const s = await res.json();
    showServerError('');
    state.lastStatus = s;
    renderStatus(s);
    document.body.dataset.statusPolls = String(Number(document.body.dataset.statusPolls || 0) + 1);
  } catch (e) {
    showServerError(`The server cannot be reached (${e.message}).`);
  } finally {
    state.statusInFlight = false;
  }
}

function startPolling() {
  if (state.statusTimer) return;
  pollStatus();
  state.statusTimer = setInterval(pollStatus, STATUS_INTERVAL_MS);
}

function stopPolling() {
  clearInterval(state.statusTimer);
  state.statusTimer = null;
}

// ---- Tabs, key, keyboard ---------------------------------------------------------------------------

function selectTab(name, focus = false) {
  for (const [tab, view] of [['tab-chat', 'view-chat'], ['tab-server', 'view-server']]) {
    const on = tab === `tab-${name}`;
    $(tab).setAttribute('aria-selected', String(on));
    $(tab).tabIndex = on ? 0 : -1;
    $(view).hidden = !on;
    if (on && focus) $(tab).focus();
  }
  if (name === 'server' && !document.hidden) startPolling();
  else stopPolling();
  if (location.hash !== `#${name}`) history.replaceState(null, '', `#${name}`);
}

function init() {
  $('tab-chat').addEventListener('click', () => selectTab('chat'));
  $('tab-server').addEventListener('click', () => selectTab('server'));
  document.querySelector('.tabs').addEventListener('keydown', (e) => {
    if (e.key !== 'ArrowLeft' && e.key !== 'ArrowRight' && e.key !== 'Home' && e.key !== 'End') return;
    e.preventDefault();
    const chat = $('tab-chat').getAttribute('aria-selected') === 'true';
    const next = e.key === 'Home' ? 'chat' : e.key === 'End' ? 'server' : chat ? 'server' : 'chat';
    selectTab(next, true);
  });
  // The canvases take their colours from CSS variables: redraw them when the scheme flips.
  matchMedia('(prefers-color-scheme: dark)').addEventListener('change', () => {
    if (state.lastStatus) renderStatus(state.lastStatus);
  });
  window.addEventListener('resize', () => {
    if (state.lastStatus && !$('view-server').hidden) renderStatus(state.lastStatus);
  });
  document.addEventListener('visibilitychange', () => {
    if ($('view-server').hidden || document.hidden) stopPolling();
    else startPolling();
  });

  $('composer').addEventListener('submit', (e) => {
    e.preventDefault();
    send();
  });
  $('prompt').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      send();
    }
  });
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && state.controller) stop();
  });
  $('stop').addEventListener('click', stop);
  $('clear').addEventListener('click', newConversation);

  $('key-form').addEventListener('submit', (e) => {
    e.preventDefault();
    state.apiKey = $('api-key').value.trim();
    sessionStorage.setItem(KEY_STORAGE, state.apiKey);
    $('api-key').value = '';
    $('key-panel').hidden = true;
    showChatError('');
    showServerError('');
    loadModel();
    $('prompt').focus();
  });
  $('key-forget').addEventListener('click', () => {
    state.apiKey = '';
    sessionStorage.removeItem(KEY_STORAGE);
    $('api-key').value = '';
  });
  $('key-open').addEventListener('click', () => needKey('settings'));

  selectTab(location.hash === '#server' ? 'server' : 'chat');
  loadModel();
}

init();
