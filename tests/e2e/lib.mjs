// Helpers for the end-to-end tests of `power serve`: starting and stopping
// server processes on free loopback ports, bounded waits, SSE and raw-socket
// requests, /metrics parsing and process memory readings.
//
// Every wait here is bounded: a hung server fails a test instead of hanging
// the suite. Servers listen on 127.0.0.1 only and are killed when the test
// process exits, whatever way it exits.
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';

import OpenAI from 'openai';

const children = new Set();
process.on('exit', () => {
  for (const c of children) {
    try { c.kill('SIGKILL'); } catch { /* already gone */ }
  }
});

/** The power binary and the shared test-asset folder, from the environment. */
export function env() {
  const bin = process.env.POWER_BIN;
  const shared = process.env.POWER_SHARED_DIR;
  if (!bin || !existsSync(bin)) throw new Error(`POWER_BIN must name the power executable (got '${bin ?? ''}')`);
  if (!shared || !existsSync(shared)) throw new Error(`POWER_SHARED_DIR must name the shared test-asset folder (got '${shared ?? ''}')`);
  return { bin, shared };
}

/** Absolute path of a model in the shared folder; a missing one is an error. */
export function modelPath(name) {
  const p = path.join(env().shared, 'models', name);
  if (!existsSync(p)) throw new Error(`missing test asset ${p}`);
  return p;
}

/** Rejects with a message naming what timed out when p takes longer than ms. */
export function withTimeout(p, ms, what) {
  let timer;
  const t = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
  });
  return Promise.race([p, t]).finally(() => clearTimeout(timer));
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Starts `power serve --model MODEL --host 127.0.0.1 --port 0 ...args` (model
 * null: without --model, serving the store of env.POWER_HOME) and
 * resolves once it prints its address. The result has url (http://host:port),
 * base (url + '/v1'), port, pid, modelId, stderr() and stop(). env adds
 * variables (null removes one).
 */
export async function startServer({ model, args = [], env: extra = {}, readyMs = 30000 }) {
  const { bin } = env();
  // null serves the store; an absolute path names a model outside the shared folder (one a test wrote)
  const argv = ['serve', ...(model === null ? [] : ['--model', path.isAbsolute(model) ? model : modelPath(model)]),
    '--host', '127.0.0.1', '--port', '0', ...args];
  // A null value in extra removes that variable from the server's environment.
  const childEnv = { ...process.env, ...extra };
  for (const [k, v] of Object.entries(extra)) if (v === null) delete childEnv[k];
  const child = spawn(bin, argv, { stdio: ['ignore', 'ignore', 'pipe'], env: childEnv });
  children.add(child);
  let log = '';
  const exited = new Promise((resolve) => {
    child.on('exit', (code, signal) => {
      children.delete(child);
      resolve({ code, signal });
    });
  });
  const ready = new Promise((resolve, reject) => {
    child.stderr.on('data', (d) => {
      log += d.toString();
      if (log.length > 65536) log = log.slice(-65536);
      const m = /serving (\S+|the store \([^)]*\)) on (http:\/\/127\.0\.0\.1:(\d+))/.exec(log);
      if (m) resolve({ modelId: m[1], url: m[2], port: Number(m[3]) });
    });
    child.on('error', reject);
    exited.then(({ code, signal }) => reject(new Error(`power serve exited (code ${code}, signal ${signal}) before it was ready: ${log.trim()}`)));
  });
  let info;
  try {
    info = await withTimeout(ready, readyMs, `power serve ${argv.join(' ')} to become ready`);
  } catch (e) {
    child.kill('SIGKILL');
    throw e;
  }
  let stopped = null;
  return {
    ...info,
    base: `${info.url}/v1`,
    pid: child.pid,
    stderr: () => log,
    exited,
    /** SIGTERM, then SIGKILL after graceMs; resolves to {code, signal}. */
    stop(graceMs = 15000) {
      if (stopped) return stopped;
      stopped = (async () => {
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
        try {
          return await withTimeout(exited, graceMs, 'power serve to exit after SIGTERM');
        } catch {
          child.kill('SIGKILL');
          const r = await withTimeout(exited, 5000, 'power serve to exit after SIGKILL');
          return { ...r, killed: true };
        }
      })();
      return stopped;
    },
  };
}

/** An OpenAI client for a server: no retries (the tests see every status). */
export function client(srv, opts = {}) {
  return new OpenAI({ baseURL: srv.base, apiKey: 'x', maxRetries: 0, timeout: 30000, ...opts });
}

/** POST a JSON value (or a raw string/Buffer) and read the answer. */
export async function post(srv, route, body, { headers = {}, timeoutMs = 20000 } = {}) {
  const raw = typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body);
  const r = await fetch(srv.url + route, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: raw,
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, headers: r.headers, text, json };
}

export async function get(srv, route, { headers = {}, timeoutMs = 10000 } = {}) {
  const r = await fetch(srv.url + route, { headers, signal: AbortSignal.timeout(timeoutMs) });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, headers: r.headers, text, json };
}

/** Parses a whole SSE body into its data payloads ('[DONE]' kept as a string). */
export function parseSSE(text) {
  const out = [];
  for (const ev of text.split('\n\n')) {
    for (const line of ev.split('\n')) {
      if (!line.startsWith('data: ')) continue;
      const d = line.slice(6);
      out.push(d === '[DONE]' ? d : JSON.parse(d));
    }
  }
  return out;
}

/** Unlabelled series of the Prometheus text at /metrics, by name. */
export async function metrics(srv) {
  const r = await get(srv, '/metrics');
  if (r.status !== 200) throw new Error(`/metrics answered ${r.status}`);
  const m = {};
  for (const line of r.text.split('\n')) {
    const x = /^([a-z_]+) (\S+)$/.exec(line);
    if (x) m[x[1]] = Number(x[2]);
  }
  return m;
}

/** Polls /metrics until no sequence is active or queued; returns the wait in ms. */
export async function waitIdle(srv, maxMs = 15000) {
  const t0 = Date.now();
  let m = {};
  while (Date.now() - t0 < maxMs) {
    m = await metrics(srv);
    if (m.power_active_sequences === 0 && m.power_queue_depth === 0) return Date.now() - t0;
    await sleep(50);
  }
  throw new Error(`server not idle after ${maxMs} ms: active ${m.power_active_sequences}, queued ${m.power_queue_depth}`);
}

/** Resident set size of a process in KiB (Linux). */
export function rssKb(pid) {
  const s = readFileSync(`/proc/${pid}/status`, 'utf8');
  const m = /VmRSS:\s+(\d+) kB/.exec(s);
  if (!m) throw new Error(`no VmRSS for pid ${pid}`);
  return Number(m[1]);
}

/**
 * Sends bytes on a raw TCP connection and collects the answer until the
 * server closes or timeoutMs passes (then the socket is destroyed). Resolves
 * to {status (first status line's code or 0), text, closed}.
 */
export function rawRequest(port, data, { timeoutMs = 5000, halfClose = false } = {}) {
  return new Promise((resolve) => {
    const sock = net.connect(port, '127.0.0.1');
    const chunks = [];
    let done = false;
    const finish = (closed) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sock.destroy();
      const text = Buffer.concat(chunks).toString('latin1');
      const m = /^HTTP\/1\.[01] (\d{3})/.exec(text);
      resolve({ status: m ? Number(m[1]) : 0, text, closed });
    };
    const timer = setTimeout(() => finish(false), timeoutMs);
    sock.on('connect', () => {
      sock.write(data);
      if (halfClose) sock.end();
    });
    sock.on('data', (d) => chunks.push(d));
    sock.on('end', () => finish(true));
    sock.on('close', () => finish(true));
    sock.on('error', () => finish(true));
  });
}

/** A small seeded PRNG (mulberry32), so load patterns are reproducible. */
export function prng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Reads an openai-client stream to the end: text, chunks, finish, usage. */
export async function drain(stream, kind) {
  let text = '';
  let finish = null;
  let usage = null;
  const chunks = [];
  for await (const ch of stream) {
    chunks.push(ch);
    if (ch.usage) usage = ch.usage;
    const c = ch.choices[0];
    if (!c) continue;
    text += (kind === 'chat' ? c.delta?.content : c.text) ?? '';
    if (c.finish_reason) finish = c.finish_reason;
  }
  return { text, finish, usage, chunks };
}
