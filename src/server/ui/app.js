// The chat page of power serve: talks to this server's OpenAI endpoints
// (/v1/models, streamed /v1/chat/completions), renders answers as Markdown
// into DOM nodes (never as HTML: every text goes through textContent, and
// links only keep http(s) targets), keeps the conversation and settings in
// localStorage and the API key, when the server wants one, in this tab's
// sessionStorage. Stop aborts the request; the server cancels a generation
// whose client went away.
'use strict';

const STORE = 'power.chat.v1';
const KEY = 'power.apiKey';
const $ = (id) => document.getElementById(id);

let state = load();
let controller = null;

function load() {
  try {
    const s = JSON.parse(localStorage.getItem(STORE) || 'null');
    if (s && Array.isArray(s.messages)) return { settings: {}, model: '', ...s };
  } catch { /* a damaged entry starts a new conversation */ }
  return { messages: [], settings: {}, model: '' };
}

function save() {
  try {
    localStorage.setItem(STORE, JSON.stringify(state));
  } catch (e) {
    setStatus(`Could not save the conversation: ${e.message}`);
  }
}

function setStatus(text) { $('status').textContent = text; }

// ---- Markdown, as DOM nodes -------------------------------------------

const INLINE = /(`+)([\s\S]*?[^`])\1(?!`)|\*\*([^*\n]+)\*\*|__([^_\n]+)__|\*([^*\s][^*\n]*)\*|_([^_\s][^_\n]*)_|\[([^\]\n]+)\]\((https?:\/\/[^\s)]+)\)/g;

function inline(text, parent) {
  // A regex of its own per call: the nested calls below must not move the
  // outer call's position.
  const re = new RegExp(INLINE.source, 'g');
  let last = 0;
  for (let m = re.exec(text); m; m = re.exec(text)) {
    if (m.index > last) parent.append(text.slice(last, m.index));
    let el;
    if (m[1]) {
      el = document.createElement('code');
      el.textContent = m[2];
    } else if (m[3] || m[4]) {
      el = document.createElement('strong');
      inline(m[3] || m[4], el);
    } else if (m[5] || m[6]) {
      el = document.createElement('em');
      inline(m[5] || m[6], el);
    } else {
      el = document.createElement('a');
      el.href = m[8];
      el.rel = 'noopener noreferrer';
      el.target = '_blank';
      el.textContent = m[7];
    }
    parent.append(el);
    last = re.lastIndex;
  }
  if (last < text.length) parent.append(text.slice(last));
}

function lines(parent, ls) {
  ls.forEach((l, i) => {
    if (i) parent.append(document.createElement('br'));
    inline(l, parent);
  });
}

function renderMarkdown(text, root) {
  root.replaceChildren();
  const src = text.replace(/\r\n?/g, '\n').split('\n');
  let para = [];
  let list = null;
  const flush = () => {
    if (para.length) {
      const p = document.createElement('p');
      lines(p, para);
      root.append(p);
      para = [];
    }
    list = null;
  };
  for (let i = 0; i < src.length; i++) {
    const line = src[i];
    const fence = /^\s*(```+|~~~+)\s*([\w+#.-]*)\s*$/.exec(line);
    if (fence) {
      flush();
      const body = [];
      for (i++; i < src.length && !src[i].trim().startsWith(fence[1]); i++) body.push(src[i]);
      const pre = document.createElement('pre');
      const code = document.createElement('code');
      if (fence[2]) {
        code.className = `language-${fence[2]}`;
        pre.setAttribute('aria-label', `${fence[2]} code`);
      }
      code.textContent = body.join('\n');
      pre.append(code);
      root.append(pre);
      continue;
    }
    const h = /^(#{1,4})\s+(.*)$/.exec(line);
    if (h) {
      flush();
      const el = document.createElement(`h${h[1].length + 2 > 6 ? 6 : h[1].length + 2}`);
      inline(h[2], el);
      root.append(el);
      continue;
    }
    const li = /^\s*([-*+]|\d+[.)])\s+(.*)$/.exec(line);
    if (li) {
      const ordered = /\d/.test(li[1]);
      if (para.length) flush();
      if (!list || (list.tagName === 'OL') !== ordered) {
        list = document.createElement(ordered ? 'ol' : 'ul');
        root.append(list);
      }
      const item = document.createElement('li');
      inline(li[2], item);
      list.append(item);
      continue;
    }
    const q = /^>\s?(.*)$/.exec(line);
    if (q) {
      flush();
      const bq = document.createElement('blockquote');
      inline(q[1], bq);
      root.append(bq);
      continue;
    }
    if (!line.trim()) {
      flush();
      continue;
    }
    list = null;
    para.push(line);
  }
  flush();
}

// ---- the conversation -------------------------------------------------

function statsText(s) {
  if (!s) return '';
  const parts = [];
  if (s.ttft_ms != null) parts.push(`TTFT ${s.ttft_ms.toFixed(0)} ms`);
  if (s.tok_s != null) parts.push(`${s.tok_s.toFixed(1)} tokens/s`);
  if (s.tokens != null) parts.push(`${s.tokens} tokens`);
  if (s.stopped) parts.push('stopped');
  return parts.join(' · ');
}

function messageNode(m) {
  const li = document.createElement('li');
  li.className = `msg ${m.role}`;
  const who = document.createElement('span');
  who.className = 'who';
  who.textContent = m.role === 'user' ? 'You' : 'Assistant';
  const body = document.createElement('div');
  body.className = 'body';
  const stats = document.createElement('div');
  stats.className = 'stats';
  li.append(who, body, stats);
  paint(li, m);
  return li;
}

function paint(li, m) {
  const body = li.querySelector('.body');
  if (m.role === 'user') body.textContent = m.content;
  else renderMarkdown(m.content, body);
  if (m.error) {
    const e = document.createElement('p');
    e.className = 'error';
    e.textContent = m.error;
    body.append(e);
  }
  li.querySelector('.stats').textContent = statsText(m.stats);
}

function renderAll() {
  const log = $('log');
  log.replaceChildren(...state.messages.map(messageNode));
  scrollDown();
}

function scrollDown() {
  const main = document.querySelector('main');
  main.scrollTop = main.scrollHeight;
}

// ---- the server -------------------------------------------------------

function headers() {
  const h = { 'content-type': 'application/json' };
  const k = sessionStorage.getItem(KEY);
  if (k) h.authorization = `Bearer ${k}`;
  return h;
}

function askKey() {
  return new Promise((resolve) => {
    const d = $('key-dialog');
    const input = $('key-input');
    input.value = '';
    const done = (ok) => {
      d.close();
      if (ok && input.value.trim()) {
        sessionStorage.setItem(KEY, input.value.trim());
        resolve(true);
      } else {
        resolve(false);
      }
    };
    $('key-form').onsubmit = (e) => { e.preventDefault(); done(true); };
    $('key-cancel').onclick = () => done(false);
    d.oncancel = () => done(false);
    d.showModal();
    input.focus();
  });
}

// fetch with the key; a 401 asks for one and retries once.
async function call(path, init = {}) {
  for (let attempt = 0; ; attempt++) {
    const r = await fetch(path, { ...init, headers: headers() });
    if (r.status !== 401 || attempt > 0) return r;
    sessionStorage.removeItem(KEY);
    if (!(await askKey())) return r;
  }
}

async function loadModels() {
  const sel = $('model');
  try {
    const r = await call('/v1/models');
    if (!r.ok) throw new Error(`the server answered ${r.status}`);
    const j = await r.json();
    sel.replaceChildren(...j.data.map((m) => {
      const o = document.createElement('option');
      o.value = m.id;
      o.textContent = m.id;
      return o;
    }));
    if (state.model && j.data.some((m) => m.id === state.model)) sel.value = state.model;
    state.model = sel.value;
    setStatus(`Ready: ${sel.value}`);
  } catch (e) {
    setStatus(`Could not list the models: ${e.message}`);
  }
}

function settings() {
  const num = (id) => {
    const v = $(id).value.trim();
    return v === '' ? undefined : Number(v);
  };
  return {
    system: $('system').value,
    temperature: num('temperature'),
    top_p: num('top_p'),
    max_tokens: num('max_tokens'),
    seed: num('seed'),
  };
}

function restoreSettings() {
  const s = state.settings || {};
  for (const k of ['system', 'temperature', 'top_p', 'max_tokens', 'seed']) {
    if (s[k] !== undefined && s[k] !== null) $(k).value = s[k];
  }
}

// Reads an SSE body, calling onData with each parsed data payload.
async function readSSE(body, onData) {
  const reader = body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      for (const line of ev.split('\n')) {
        if (!line.startsWith('data: ')) continue;
        const d = line.slice(6);
        if (d === '[DONE]') return;
        onData(JSON.parse(d));
      }
    }
  }
}

async function send(text) {
  const s = settings();
  state.settings = s;
  state.model = $('model').value;
  state.messages.push({ role: 'user', content: text });
  const answer = { role: 'assistant', content: '', stats: null };
  state.messages.push(answer);
  save();
  const log = $('log');
  log.append(messageNode(state.messages.at(-2)));
  const li = messageNode(answer);
  li.setAttribute('aria-busy', 'true');
  log.append(li);
  scrollDown();

  const history = state.messages.slice(0, -1).filter((m) => !m.error || m.content)
    .map((m) => ({ role: m.role, content: m.content }));
  if (s.system) history.unshift({ role: 'system', content: s.system });
  const req = { model: state.model, messages: history, stream: true, stream_options: { include_usage: true } };
  for (const k of ['temperature', 'top_p', 'max_tokens', 'seed']) if (s[k] !== undefined && !Number.isNaN(s[k])) req[k] = s[k];

  controller = new AbortController();
  $('send').disabled = true;
  $('stop').disabled = false;
  setStatus('Generating…');
  const t0 = performance.now();
  let tFirst = null;
  let chunks = 0;
  let usage = null;
  let pending = false;
  const repaint = () => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      paint(li, answer);
      scrollDown();
    });
  };
  try {
    const r = await call('/v1/chat/completions', { method: 'POST', body: JSON.stringify(req), signal: controller.signal });
    if (!r.ok) {
      let msg = `HTTP ${r.status}`;
      try { msg = (await r.json()).error.message; } catch { /* not JSON */ }
      throw new Error(msg);
    }
    await readSSE(r.body, (d) => {
      if (d.error) throw new Error(d.error.message);
      if (d.usage) usage = d.usage;
      const delta = d.choices?.[0]?.delta?.content;
      if (delta) {
        if (tFirst === null) tFirst = performance.now();
        chunks++;
        answer.content += delta;
        repaint();
      }
    });
    setStatus('Done');
  } catch (e) {
    if (e.name === 'AbortError') {
      setStatus('Stopped');
    } else {
      answer.error = `Error: ${e.message}`;
      setStatus(answer.error);
    }
  } finally {
    const tEnd = performance.now();
    const tokens = usage ? usage.completion_tokens : chunks;
    answer.stats = {
      ttft_ms: tFirst === null ? null : tFirst - t0,
      tok_s: tFirst !== null && tokens > 1 && tEnd > tFirst ? (tokens - 1) / ((tEnd - tFirst) / 1000) : null,
      tokens,
      stopped: controller.signal.aborted,
    };
    controller = null;
    $('send').disabled = false;
    $('stop').disabled = true;
    li.removeAttribute('aria-busy');
    paint(li, answer);
    save();
    $('prompt').focus();
  }
}

function stop() {
  if (controller) controller.abort();
}

function init() {
  restoreSettings();
  renderAll();
  $('composer').addEventListener('submit', (e) => {
    e.preventDefault();
    const text = $('prompt').value.trim();
    if (!text || controller) return;
    $('prompt').value = '';
    send(text);
  });
  $('prompt').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      $('composer').requestSubmit();
    }
  });
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && controller) stop();
  });
  $('stop').addEventListener('click', stop);
  $('new-chat').addEventListener('click', () => {
    stop();
    state.messages = [];
    save();
    renderAll();
    setStatus('New conversation');
    $('prompt').focus();
  });
  $('forget-key').addEventListener('click', () => {
    sessionStorage.removeItem(KEY);
    setStatus('API key forgotten');
  });
  $('model').addEventListener('change', () => { state.model = $('model').value; save(); });
  for (const id of ['system', 'temperature', 'top_p', 'max_tokens', 'seed']) {
    $(id).addEventListener('change', () => { state.settings = settings(); save(); });
  }
  window.addEventListener('pagehide', save);
  loadModels();
  $('prompt').focus();
}

init();
