// Scale-out recipe test: 3 `power serve` replicas behind HAProxy, started by
// deploy/run-local with deploy/haproxy/power.cfg, all on loopback.
//
//  1. 24 keyed conversations of 4 turns from 8 concurrent clients, once with
//     round-robin routing and once with the recipe's consistent hash on
//     prompt_cache_key: the prefix-cache hit rate of turns 2-4 (from the
//     replicas' /metrics), TTFT medians, and every answer identical between
//     the two runs (greedy decoding).
//  2. SIGKILL of one replica under load: its requests in flight fail with an
//     error, not a hang; requests sent after the kill succeed; once HAProxy
//     has marked it down only its keys have moved.
//  3. Rolling restart (SIGTERM, drain, start again) of each replica in turn
//     under load: no failed request.
//  4. A full replica's 503 is retried on another replica (client sees 200); a
//     400 and a 408 from it are not retried.
//
// Run by tests/cli/scaleout.sh (POWER_BIN, POWER_SHARED_DIR). Every wait is
// bounded in time and every loop in count; the whole run is bounded by the
// caller's timeout too. Prints the figures it measured.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { env, modelPath, sleep, withTimeout } from './lib.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const runLocal = path.join(root, 'deploy', 'run-local');
const MODEL = 'syn-qwen2-Q4_K_M.gguf';
const N_REPLICAS = 3;
const PARALLEL = 2;
const QUEUE = 4;
const N_CONV = 24;
const N_TURNS = 4;
const N_CLIENTS = 8;
const MAX_TOKENS = 12;
const REQ_TIMEOUT_MS = 90000;

let failures = 0;
const report = [];
function check(ok, what) {
  if (!ok) failures++;
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}`);
}
function note(line) {
  report.push(line);
  console.log(line);
}

// ---- processes --------------------------------------------------------------

const procs = new Set();
const runDirs = new Set(); // run-local folders whose pid files name live processes
process.on('exit', () => {
  for (const dir of runDirs) {
    let names = [];
    try { names = readdirSync(dir).filter((f) => f.endsWith('.pid')); } catch { /* removed */ }
    for (const f of names) {
      try { procs.add(Number(readFileSync(path.join(dir, f), 'utf8').trim())); } catch { /* gone */ }
    }
  }
  for (const p of procs) {
    try { process.kill(p, 'SIGKILL'); } catch { /* gone */ }
  }
});

function pidAlive(pid) {
  try {
    const st = readFileSync(`/proc/${pid}/status`, 'utf8');
    return !/^State:\s+Z/m.test(st);
  } catch {
    return false;
  }
}

async function waitGone(pid, ms, what) {
  const t0 = Date.now();
  for (let i = 0; i < 100000 && Date.now() - t0 < ms; i++) {
    if (!pidAlive(pid)) return;
    await sleep(20);
  }
  throw new Error(`${what} (pid ${pid}) still running after ${ms} ms`);
}

/** Waits until nothing accepts connections on port (a process being killed
 * shows as a zombie before its last thread has closed its sockets). */
async function waitRefused(port, ms) {
  const t0 = Date.now();
  for (let i = 0; i < 100000 && Date.now() - t0 < ms; i++) {
    const refused = await new Promise((resolve) => {
      const s = net.connect(port, '127.0.0.1');
      s.once('connect', () => { s.destroy(); resolve(false); });
      s.once('error', () => resolve(true));
    });
    if (refused) return;
    await sleep(20);
  }
  throw new Error(`port ${port} still accepts connections after ${ms} ms`);
}

/** Free TCP ports base..base+count-1 on 127.0.0.1 (bounded tries). */
async function freePorts(count) {
  const tryPort = (p) => new Promise((resolve) => {
    const s = net.createServer();
    s.once('error', () => resolve(false));
    s.listen(p, '127.0.0.1', () => s.close(() => resolve(true)));
  });
  for (let attempt = 0; attempt < 50; attempt++) {
    const base = 20000 + Math.floor(Math.random() * 40000);
    let ok = true;
    for (let i = 0; i < count && ok; i++) ok = await tryPort(base + i);
    if (ok) return base;
  }
  throw new Error('no run of free loopback ports found');
}

/** deploy/run-local N with HAProxy on lbPort; resolves once it is ready. */
async function startCluster(balance) {
  const lbPort = await freePorts(N_REPLICAS + 1);
  const dir = mkdtempSync(path.join(os.tmpdir(), 'power-scaleout-'));
  runDirs.add(dir);
  const args = [runLocal, String(N_REPLICAS), '--model', modelPath(MODEL), '--balance', balance, '--port', String(lbPort),
    '--parallel', String(PARALLEL), '--queue', String(QUEUE), '--threads', '1', '--dir', dir, '--ready', '180',
    '--', '--prompt-cache-entries', '32'];
  const child = spawn('sh', args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, POWER: env().bin } });
  procs.add(child.pid);
  let out = '';
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => { procs.delete(child.pid); resolve({ code, signal }); }));
  const ready = new Promise((resolve, reject) => {
    const on = (d) => {
      out += d.toString();
      if (/run-local: ready/.test(out)) resolve();
    };
    child.stdout.on('data', on);
    child.stderr.on('data', on);
    exited.then((r) => reject(new Error(`run-local exited (${JSON.stringify(r)}): ${out}`)));
  });
  try {
    await withTimeout(ready, 240000, 'run-local to start 3 replicas and HAProxy');
  } catch (e) {
    child.kill('SIGTERM');
    throw new Error(`${e.message}; run-local said: ${out.trim()} (run folder ${dir})`);
  }
  const replicas = [];
  for (let k = 1; k <= N_REPLICAS; k++) replicas.push({ name: `r${k}`, k, url: `http://127.0.0.1:${lbPort + k}` });
  const cluster = {
    dir, lbUrl: `http://127.0.0.1:${lbPort}`, replicas, balance,
    pid: (k) => Number(readFileSync(path.join(dir, `r${k}.pid`), 'utf8').trim()),
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      try {
        await withTimeout(exited, 60000, 'run-local to stop');
      } finally {
        for (const r of replicas) {
          try { process.kill(cluster.pid(r.k), 'SIGKILL'); } catch { /* gone */ }
        }
        // Logs stay for a failed run (HAProxy's and each replica's).
        runDirs.delete(dir);
        if (failures) console.log(`logs of the ${balance} run kept in ${dir}`);
        else rmSync(dir, { recursive: true, force: true });
      }
    },
  };
  for (const r of replicas) procs.add(cluster.pid(r.k));
  return cluster;
}

/** Runs `deploy/run-local CMD K` (restart or start) to its end. */
async function runLocalCmd(cluster, cmd, k) {
  const child = spawn('sh', [runLocal, cmd, String(k), '--dir', cluster.dir], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, POWER: env().bin } });
  let out = '';
  child.stdout.on('data', (d) => { out += d; });
  child.stderr.on('data', (d) => { out += d; });
  const r = await withTimeout(new Promise((resolve) => child.on('exit', (code) => resolve(code))), 240000, `run-local ${cmd} ${k}`);
  if (r !== 0) throw new Error(`run-local ${cmd} ${k} failed (${r}): ${out}`);
  procs.add(cluster.pid(k));
}

// ---- HAProxy runtime API ----------------------------------------------------

function haproxyCmd(cluster, cmd) {
  return withTimeout(new Promise((resolve, reject) => {
    const s = net.connect(path.join(cluster.dir, 'haproxy.sock'));
    let data = '';
    s.on('connect', () => s.end(cmd + '\n'));
    s.on('data', (d) => { data += d; });
    s.on('end', () => resolve(data));
    s.on('error', reject);
  }), 10000, `haproxy runtime API: ${cmd}`);
}

/** `show stat` as rows keyed by "backend/server". */
async function haproxyStat(cluster) {
  const text = await haproxyCmd(cluster, 'show stat');
  const lines = text.split('\n').filter((l) => l.length);
  const head = lines[0].replace(/^# /, '').split(',');
  const rows = {};
  for (const l of lines.slice(1)) {
    const f = l.split(',');
    const row = {};
    head.forEach((h, i) => { row[h] = f[i]; });
    rows[`${row.pxname}/${row.svname}`] = row;
  }
  return rows;
}

async function waitServerStatus(cluster, name, want, ms) {
  const t0 = Date.now();
  let st = '';
  for (let i = 0; i < 10000 && Date.now() - t0 < ms; i++) {
    st = (await haproxyStat(cluster))[`power_by_key/${name}`]?.status ?? '';
    if (st === want) return Date.now() - t0;
    await sleep(100);
  }
  throw new Error(`HAProxy did not mark ${name} ${want} within ${ms} ms (status ${st})`);
}

const retriesOf = (rows) => Object.entries(rows).filter(([k]) => k.startsWith('power_by_key/r') || k.startsWith('power_least_conn/r'))
  .reduce((a, [, r]) => ({ wretr: a.wretr + Number(r.wretr || 0), wredis: a.wredis + Number(r.wredis || 0) }), { wretr: 0, wredis: 0 });

// ---- requests ---------------------------------------------------------------

/** /metrics series (labelled ones with their labels) of one replica. */
async function metrics(url) {
  const r = await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(10000) });
  const text = await r.text();
  const m = {};
  for (const line of text.split('\n')) {
    const x = /^([a-z_]+(?:\{[^}]*\})?) (\S+)$/.exec(line);
    if (x) m[x[1]] = Number(x[2]);
  }
  return m;
}

/**
 * A chat completion (streamed when body.stream) on its own TCP connection,
 * so that a failure belongs to this request and not to a reused keep-alive
 * connection. Resolves to {status, replica, text, usage, ttftMs, ms, error};
 * error is set when the request failed (status not 200, a cut stream, an
 * error event, a socket error or the timeout).
 */
function chat(baseUrl, body, { headers = {}, timeoutMs = REQ_TIMEOUT_MS, onHeaders } = {}) {
  const t0 = performance.now();
  const res = { status: 0, replica: null, text: '', usage: null, ttftMs: null, ms: 0, error: null };
  const payload = Buffer.from(JSON.stringify(body));
  return new Promise((resolve) => {
    let settled = false;
    const finish = (err) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (err && !res.error) res.error = err;
      res.ms = performance.now() - t0;
      resolve(res);
    };
    const req = http.request(`${baseUrl}/v1/chat/completions`, {
      method: 'POST', agent: false,
      headers: { 'content-type': 'application/json', 'content-length': payload.length, ...headers },
    });
    const timer = setTimeout(() => { req.destroy(); finish(`timed out after ${timeoutMs} ms`); }, timeoutMs);
    req.on('error', (e) => finish(`${e.code ?? e.name}: ${e.message}`));
    req.on('response', (r) => {
      res.status = r.statusCode;
      res.replica = r.headers['x-power-replica'] ?? null;
      if (onHeaders) onHeaders(res);
      let buf = '';
      let done = false;
      r.setEncoding('utf8');
      r.on('data', (d) => {
        buf += d;
        if (r.statusCode !== 200 || !body.stream) return;
        let cut;
        while ((cut = buf.indexOf('\n\n')) >= 0) {
          const ev = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          for (const line of ev.split('\n')) {
            if (!line.startsWith('data: ')) continue;
            const d2 = line.slice(6);
            if (d2 === '[DONE]') { done = true; continue; }
            let j;
            try {
              j = JSON.parse(d2);
            } catch {
              res.error = `not JSON in the stream: ${d2.slice(0, 80)}`;
              continue;
            }
            if (j.error) { res.error = `stream error: ${j.error.message}`; continue; }
            if (res.ttftMs === null) res.ttftMs = performance.now() - t0;
            if (j.usage) res.usage = j.usage;
            const c = j.choices?.[0];
            if (c?.delta?.content) res.text += c.delta.content;
          }
        }
      });
      r.on('error', (e) => finish(`response ${e.code ?? e.name}: ${e.message}`));
      r.on('close', () => {
        if (!r.complete) return finish('the answer was cut off');
        if (r.statusCode !== 200) return finish(`HTTP ${r.statusCode}: ${buf.slice(0, 200)}`);
        if (body.stream) return finish(done ? null : 'stream ended without [DONE]');
        try {
          const j = JSON.parse(buf);
          res.text = j.choices[0].message.content;
          res.usage = j.usage;
          finish(null);
        } catch (e) {
          finish(`bad JSON answer: ${e.message}`);
        }
      });
    });
    req.end(payload);
  });
}

const SYSTEM = (c) => `You are assistant number ${c} of the scale-out test. ` +
  'Answer in short sentences about load balancers, prefix caches, key-value memory, rolling restarts, ' +
  'health checks, consistent hashing rings, queues, admission control and the art of draining a server. '.repeat(4);

function turnBody(conv, history, turn, key) {
  const messages = [{ role: 'system', content: SYSTEM(conv) }, ...history,
    { role: 'user', content: `Turn ${turn} of conversation ${conv}: tell me about item ${conv * 7 + turn}.` }];
  return { messages, max_tokens: MAX_TOKENS, temperature: 0, stream: true,
    stream_options: { include_usage: true }, prompt_cache_key: key };
}

const sumKeys = (ms, name) => ms.reduce((a, m) => a + (m[name] ?? 0), 0);
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? (s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2) : NaN;
};

/** 24 conversations x 4 turns from 8 clients; returns per-turn results and cache deltas. */
async function conversations(cluster, keyPrefix) {
  const before = await Promise.all(cluster.replicas.map((r) => metrics(r.url)));
  const results = []; // [conv][turn]
  let next = 0;
  const client = async () => {
    for (let guard = 0; guard < N_CONV; guard++) {
      const conv = next++;
      if (conv >= N_CONV) return;
      const history = [];
      results[conv] = [];
      for (let t = 1; t <= N_TURNS; t++) {
        const body = turnBody(conv, history, t, `${keyPrefix}-conv-${conv}`);
        const r = await chat(cluster.lbUrl, body);
        results[conv][t] = r;
        if (r.error) return;
        history.push(body.messages[body.messages.length - 1], { role: 'assistant', content: r.text });
      }
    }
  };
  await withTimeout(Promise.all(Array.from({ length: N_CLIENTS }, client)), 600000, 'the conversation run');
  const after = await Promise.all(cluster.replicas.map((r) => metrics(r.url)));
  const delta = (name) => sumKeys(after, name) - sumKeys(before, name);
  return {
    results,
    requests: delta('power_prompt_cache_requests_total'),
    hits: delta('power_prompt_cache_hits_total'),
    reused: delta('power_prompt_cache_reused_tokens_total'),
    evaluated: delta('power_prompt_cache_evaluated_tokens_total'),
  };
}

function summarize(label, run) {
  const all = run.results.flatMap((c) => c.slice(1));
  const failed = all.filter((r) => !r || r.error);
  const later = run.results.flatMap((c) => c.slice(2));
  const hitRate = run.hits / (N_CONV * (N_TURNS - 1));
  const respHits = later.filter((r) => r?.usage?.prompt_tokens_details?.cached_tokens > 0).length;
  const ttft = median(later.map((r) => r.ttftMs));
  const ttft1 = median(run.results.map((c) => c[1]?.ttftMs));
  note(`${label.padEnd(12)} requests=${all.length} failed=${failed.length} keyed=${run.requests} ` +
    `hits=${run.hits}/${N_CONV * (N_TURNS - 1)} (turns 2-4) hit_rate=${(100 * hitRate).toFixed(1)}% ` +
    `(responses with cached_tokens>0: ${respHits}) reused_tokens=${run.reused} evaluated_tokens=${run.evaluated} ` +
    `(${(100 * run.reused / Math.max(1, run.reused + run.evaluated)).toFixed(0)}% of keyed prompt tokens reused) ` +
    `ttft_median_turn1=${ttft1.toFixed(0)}ms ttft_median_turns2-4=${ttft.toFixed(0)}ms`);
  if (failed.length) console.log(`  first failure: ${failed[0]?.error}`);
  return { hitRate, failed: failed.length };
}

// ---- load generator for the failure tests -----------------------------------

/** Clients that each send streamed requests over `keys` until stop(). */
function load(cluster, keys, { clients = N_CLIENTS, maxTokens = 24, stream = true } = {}) {
  let stopping = false;
  const done = [];
  const inflight = new Set();
  let ids = 0;
  const run = async (c) => {
    for (let i = 0; i < 10000 && !stopping; i++) {
      const key = keys[(c * 31 + i * 7) % keys.length];
      const rec = { id: ids++, key, sentAt: Date.now(), replica: null };
      inflight.add(rec);
      const body = { max_tokens: maxTokens, temperature: 0, stream, prompt_cache_key: key,
        messages: [{ role: 'user', content: `load request ${i} of client ${c} for ${key}` }] };
      const r = await chat(cluster.lbUrl, body, { onHeaders: (h) => { rec.replica = h.replica; } });
      inflight.delete(rec);
      done.push({ ...rec, ...r, endAt: Date.now() });
    }
  };
  const all = Promise.all(Array.from({ length: clients }, (_, c) => run(c)));
  return {
    done, inflight,
    async stop() { stopping = true; await withTimeout(all, REQ_TIMEOUT_MS + 30000, 'load clients to finish'); },
  };
}

/** Which replica each key is routed to now (one short request each). */
async function keyMap(cluster, keys) {
  const map = {};
  for (const key of keys) {
    const r = await chat(cluster.lbUrl, { max_tokens: 1, temperature: 0, prompt_cache_key: key,
      messages: [{ role: 'user', content: 'where am I' }] });
    if (r.error) throw new Error(`key probe ${key}: ${r.error}`);
    map[key] = r.replica;
  }
  return map;
}

// ---- the tests ---------------------------------------------------------------

async function testKill(cluster, keys) {
  const before = await keyMap(cluster, keys);
  const counts = {};
  for (const k of keys) counts[before[k]] = (counts[before[k]] ?? 0) + 1;
  const victim = Object.entries(counts).sort((a, b) => b[1] - a[1])[0][0];
  const vk = Number(victim.slice(1));
  const l = load(cluster, keys, { maxTokens: 200 });
  // Wait until a stream of the victim's has started.
  const t0 = Date.now();
  for (let i = 0; i < 2000 && Date.now() - t0 < 60000; i++) {
    if ([...l.inflight].filter((r) => r.replica === victim).length >= 1) break;
    await sleep(20);
  }
  const onVictim = [...l.inflight].filter((r) => r.replica === victim);
  const pid = cluster.pid(vk);
  const killSentAt = Date.now();
  process.kill(pid, 'SIGKILL');
  await waitGone(pid, 10000, `replica ${victim}`);
  await waitRefused(Number(new URL(cluster.replicas[vk - 1].url).port), 10000);
  const killedAt = Date.now();
  await sleep(3000); // load carries on while HAProxy notices
  await l.stop();
  const cut = l.done.filter((r) => onVictim.some((v) => v.id === r.id));
  const after = l.done.filter((r) => r.sentAt > killedAt);
  const afterFailed = after.filter((r) => r.error);
  const slowest = Math.max(0, ...cut.map((r) => r.endAt - killSentAt));
  const queuedThere = l.done.filter((r) => r.sentAt < killSentAt && !r.replica && r.error);
  note(`kill: SIGKILL ${victim} with ${onVictim.length} of its streams in flight: ` +
    `${cut.filter((r) => r.error).length}/${cut.length} failed with an error, the last ${slowest} ms after the kill ` +
    `(first: ${cut[0]?.error ?? '-'}); requests waiting there that failed before an answer started: ${queuedThere.length} ` +
    `(first: ${queuedThere[0]?.error.slice(0, 40) ?? '-'}); requests sent after it had died: ${after.length}, failed ${afterFailed.length}`);
  check(onVictim.length >= 1, 'a stream was in flight on the killed replica');
  check(cut.length === onVictim.length && cut.every((r) => r.error), 'its in-flight streams ended with an error');
  check(slowest < REQ_TIMEOUT_MS, 'none of them hung until the request timeout');
  check(after.length > 0 && afterFailed.length === 0, `requests sent after the kill succeeded (${afterFailed[0]?.error ?? 'all ok'})`);
  await waitServerStatus(cluster, victim, 'DOWN', 30000);
  const moved = await keyMap(cluster, keys);
  const kept = keys.filter((k) => before[k] !== victim);
  const keptSame = kept.filter((k) => moved[k] === before[k]).length;
  const victimKeys = keys.filter((k) => before[k] === victim);
  note(`kill: keys of ${victim}: ${victimKeys.length}, all moved: ${victimKeys.every((k) => moved[k] !== victim)}; ` +
    `keys of the others kept their replica: ${keptSame}/${kept.length}`);
  check(keptSame === kept.length, 'only the killed replica\'s keys moved');
  await runLocalCmd(cluster, 'start', vk);
  await waitServerStatus(cluster, victim, 'UP', 30000);
  const back = await keyMap(cluster, keys);
  check(keys.every((k) => back[k] === before[k]), 'after the replica came back every key is where it was');
}

async function testRolling(cluster, keys) {
  const l = load(cluster, keys, { maxTokens: 24 });
  await sleep(1000);
  const t0 = Date.now();
  for (const r of cluster.replicas) {
    await runLocalCmd(cluster, 'restart', r.k);
    await waitServerStatus(cluster, r.name, 'UP', 30000);
  }
  const ms = Date.now() - t0;
  await sleep(1000);
  await l.stop();
  const failed = l.done.filter((r) => r.error);
  const served = {};
  for (const r of l.done) served[r.replica] = (served[r.replica] ?? 0) + 1;
  note(`rolling restart of ${cluster.replicas.length} replicas under load from ${N_CLIENTS} clients (${ms} ms): ` +
    `${l.done.length} requests, ${failed.length} failed (served by ${JSON.stringify(served)})`);
  if (failed.length) console.log(`  failures: ${failed.slice(0, 5).map((r) => `${r.replica ?? '-'} ${r.error}`).join('; ')}`);
  check(l.done.length > 0 && failed.length === 0, 'zero failed requests during the rolling restart');
}

async function testOverload(cluster, keys) {
  const map = await keyMap(cluster, keys);
  const target = cluster.replicas[0];
  const hot = keys.find((k) => map[k] === target.name);
  if (!hot) throw new Error(`no key routed to ${target.name}`);
  const fillers = [];
  const fill = (n) => {
    for (let i = 0; i < n; i++) {
      const ac = new AbortController();
      const body = { max_tokens: 1500, temperature: 0, stream: true, prompt_cache_key: `filler-${fillers.length}`,
        messages: [{ role: 'user', content: `fill the replica ${fillers.length}` }] };
      fillers.push({ ac, p: fetch(`${target.url}/v1/chat/completions`, { method: 'POST', signal: ac.signal,
        headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
        .then(async (r) => {
          const rd = r.body.getReader();
          for (let k = 0; k < 100000; k++) if ((await rd.read()).done) break;
        }).catch(() => {}) });
    }
  };
  const waitState = async (active, queued) => {
    const t0 = Date.now();
    let m = {};
    for (let i = 0; i < 2000 && Date.now() - t0 < 60000; i++) {
      m = await metrics(target.url);
      if (m.power_active_sequences === active && m.power_queue_depth === queued) return m;
      await sleep(20);
    }
    throw new Error(`${target.name} did not reach ${active} active / ${queued} queued (has ${m.power_active_sequences}/${m.power_queue_depth})`);
  };
  try {
    // 408: the slots are busy, the queue has room; the request's own
    // deadline passes in the queue. Never retried.
    fill(PARALLEL);
    await waitState(PARALLEL, 0);
    let st0 = retriesOf(await haproxyStat(cluster));
    const r408 = await chat(cluster.lbUrl, { max_tokens: 4, temperature: 0, prompt_cache_key: hot,
      messages: [{ role: 'user', content: 'too late' }] }, { headers: { 'x-request-timeout': '0.5' } });
    let st1 = retriesOf(await haproxyStat(cluster));
    note(`overload: deadline in ${target.name}'s queue: client got ${r408.status} from ${r408.replica}, HAProxy retries +${st1.wretr - st0.wretr}`);
    check(r408.status === 408 && r408.replica === target.name && st1.wretr === st0.wretr, '408 from the replica is not retried');
    // 400: never retried.
    st0 = st1;
    const r400 = await chat(cluster.lbUrl, { max_tokens: 4, temperature: 'hot', prompt_cache_key: hot,
      messages: [{ role: 'user', content: 'bad' }] });
    st1 = retriesOf(await haproxyStat(cluster));
    note(`overload: invalid request: client got ${r400.status} from ${r400.replica}, HAProxy retries +${st1.wretr - st0.wretr}`);
    check(r400.status === 400 && r400.replica === target.name && st1.wretr === st0.wretr, '400 from the replica is not retried');
    // 503: slots and queue full (filled directly, as a second balancer or
    // another client would): the hot key's requests are retried elsewhere.
    fill(QUEUE);
    await waitState(PARALLEL, QUEUE);
    const m0 = await metrics(target.url);
    st0 = retriesOf(await haproxyStat(cluster));
    const hotRes = await Promise.all(Array.from({ length: 4 }, (_, i) => chat(cluster.lbUrl, { max_tokens: 4,
      temperature: 0, prompt_cache_key: hot, messages: [{ role: 'user', content: `hot ${i}` }] })));
    st1 = retriesOf(await haproxyStat(cluster));
    const m1 = await metrics(target.url);
    const refused = m1['power_requests_refused_total{reason="overloaded"}'] - m0['power_requests_refused_total{reason="overloaded"}'];
    const ok = hotRes.filter((r) => r.status === 200 && !r.error);
    const elsewhere = [...new Set(ok.map((r) => r.replica))];
    note(`overload: ${target.name} full (${PARALLEL} running + ${QUEUE} queued); 4 requests of its hot key: ` +
      `${ok.length} answered 200 by ${elsewhere.join(',')}; ${target.name} refused ${refused} with 503; ` +
      `HAProxy retries +${st1.wretr - st0.wretr}, redispatches +${st1.wredis - st0.wredis}`);
    check(ok.length === 4 && !elsewhere.includes(target.name), 'the client saw success, from another replica');
    check(refused >= 4 && st1.wretr - st0.wretr >= 4, 'each was a 503 from the full replica, retried by HAProxy');
  } finally {
    for (const f of fillers) f.ac.abort();
    await withTimeout(Promise.all(fillers.map((f) => f.p)), 30000, 'filler requests to end');
  }
}

async function main() {
  env();
  if (!existsSync(runLocal)) throw new Error(`missing ${runLocal}`);
  const cmd = `POWER_BIN=... node tests/e2e/scaleout.mjs (model ${MODEL}, ${N_REPLICAS} replicas --parallel ${PARALLEL} --queue ${QUEUE} --threads 1 --prompt-cache-entries 32, ${N_CONV} conversations x ${N_TURNS} turns, ${N_CLIENTS} clients, max_tokens ${MAX_TOKENS})`;
  note(`scale-out test: ${cmd}`);

  // 1. Affinity against round-robin, each on fresh replicas.
  let rr;
  let cluster = await startCluster('roundrobin');
  try {
    rr = await conversations(cluster, 'rr');
  } catch (e) {
    failures++;
    throw e;
  } finally {
    await cluster.stop();
  }
  cluster = await startCluster('key');
  try {
    const ka = await conversations(cluster, 'ka');
    const sRR = summarize('round-robin', rr);
    const sKA = summarize('affinity', ka);
    check(sRR.failed === 0 && sKA.failed === 0, 'no conversation request failed');
    check(sKA.hitRate >= 0.95, `affinity: turns 2-4 hit rate >= 95% (${(100 * sKA.hitRate).toFixed(1)}%)`);
    check(sRR.hitRate < sKA.hitRate, 'round-robin reuses less than affinity');
    let same = 0;
    let total = 0;
    let firstDiff = null;
    for (let c = 0; c < N_CONV; c++) {
      for (let t = 1; t <= N_TURNS; t++) {
        total++;
        const a = rr.results[c]?.[t]?.text;
        const b = ka.results[c]?.[t]?.text;
        if (a !== undefined && a === b) same++;
        else if (!firstDiff) firstDiff = `conversation ${c} turn ${t}: ${JSON.stringify(a)} vs ${JSON.stringify(b)}`;
      }
    }
    note(`answers identical between the two runs: ${same}/${total}${firstDiff ? ` (first difference: ${firstDiff})` : ''}`);
    check(same === total, 'every answer identical between round-robin and affinity');

    const keys = Array.from({ length: 24 }, (_, i) => `probe-key-${i}`);
    // 2-4. Failures, on the affinity deployment.
    await testKill(cluster, keys);
    await testRolling(cluster, keys);
    await testOverload(cluster, keys);
  } catch (e) {
    failures++;
    throw e;
  } finally {
    await cluster.stop();
  }
  console.log('\n' + report.join('\n'));
  if (failures) {
    console.log(`scale-out: ${failures} check(s) failed`);
    process.exit(1);
  }
  console.log('scale-out: all checks passed');
}

main().catch((e) => {
  console.error(`FAIL: ${e.stack ?? e}`);
  process.exit(1);
});
