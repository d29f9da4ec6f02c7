#!/usr/bin/env node
// serve-load.mjs - serving throughput of `power serve`: N concurrent
// streamed completions of M tokens each, for several N, and the aggregate
// generated tokens per second at each N beside the single-stream figure.
//
//   node bench/serve-load.mjs MODEL.gguf [-c 1,4,8] [-n 128] [-r 5]
//        [--threads 2] [--power BIN] [--json]
//   node bench/serve-load.mjs --url http://127.0.0.1:PORT [-c ...] [-n ...]
//
// With a model, a fresh `power serve` (BIN: --power, else $POWER_BIN, else
// build/power) is started on 127.0.0.1 with a free port and
// --parallel = the largest N, and stopped at the end. With --url the server
// at that address is measured as it is configured (it must serve at least
// max(N) sequences at once, or the figures include queueing).
//
// One repetition at concurrency N sends N streamed greedy completions at
// once (distinct prompts, max_tokens M, stream_options.include_usage) and
// times from the first request sent to the last stream ended; its figure is
// the sum of the completion_tokens the server reports over that wall time.
// A model may end a stream early (end of text), so the token counts come
// from the server, never from M. Each N gets one warm-up repetition and r
// timed ones; reported: the median aggregate tok/s, its ratio to the N = 1
// median, the median time to first token and the median per-stream rate.
// Only loopback addresses are targeted.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));

function die(msg) {
  process.stderr.write(`serve-load: ${msg}\n`);
  process.exit(1);
}

function parseArgs(argv) {
  const o = { conc: [1, 4, 8], tokens: 128, reps: 5, threads: 2, power: null, url: null, model: null, json: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const v = () => {
      if (i + 1 >= argv.length) die(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '-c' || a === '--concurrency') o.conc = v().split(',').map(Number);
    else if (a === '-n' || a === '--tokens') o.tokens = Number(v());
    else if (a === '-r' || a === '--reps') o.reps = Number(v());
    else if (a === '--threads') o.threads = Number(v());
    else if (a === '--power') o.power = v();
    else if (a === '--url') o.url = v().replace(/\/+$/, '');
    else if (a === '--json') o.json = true;
    else if (a === '-h' || a === '--help') {
      process.stdout.write('usage: node bench/serve-load.mjs (MODEL.gguf | --url URL) [-c 1,4,8] [-n 128] [-r 5] [--threads 2] [--power BIN] [--json]\n');
      process.exit(0);
    } else if (a.startsWith('-')) die(`unknown option ${a}`);
    else o.model = a;
  }
  if (!o.model === !o.url) die('give a model file or --url (one of them)');
  if (!o.conc.length || o.conc.some((n) => !Number.isInteger(n) || n < 1 || n > 256)) die('-c takes integers in 1..256');
  if (!Number.isInteger(o.tokens) || o.tokens < 1) die('-n takes a positive integer');
  if (!Number.isInteger(o.reps) || o.reps < 1 || o.reps > 100) die('-r takes an integer in 1..100');
  if (o.url && !/^http:\/\/(127\.\d+\.\d+\.\d+|localhost|\[::1\])(:\d+)?$/.test(o.url)) die('--url must be a loopback http address');
  return o;
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

function timeout(p, ms, what) {
  let t;
  return Promise.race([p, new Promise((_, rej) => { t = setTimeout(() => rej(new Error(`timed out after ${ms} ms: ${what}`)), ms); })])
    .finally(() => clearTimeout(t));
}

async function startServer(o) {
  const bin = resolve(o.power || process.env.POWER_BIN || join(here, '..', 'build', 'power'));
  if (!existsSync(bin)) die(`no power binary at ${bin} (build it, or give --power BIN)`);
  if (!existsSync(o.model)) die(`no model file ${o.model}`);
  const args = ['serve', '--model', o.model, '--host', '127.0.0.1', '--port', '0', '--threads', String(o.threads),
    '--parallel', String(Math.max(...o.conc)), '--queue', String(Math.max(...o.conc))];
  const child = spawn(bin, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  process.on('exit', () => child.kill('SIGKILL'));
  let log = '';
  const url = await timeout(new Promise((res, rej) => {
    child.stderr.on('data', (d) => {
      log += d;
      const m = /serving \S+ on (http:\/\/127\.0\.0\.1:\d+)/.exec(log);
      if (m) res(m[1]);
    });
    child.on('exit', (c) => rej(new Error(`power serve exited (${c}): ${log.trim()}`)));
  }), 60000, 'power serve to start');
  return {
    url,
    stop: () => new Promise((res) => {
      if (child.exitCode !== null) return res();
      const t = setTimeout(() => child.kill('SIGKILL'), 15000);
      child.on('exit', () => { clearTimeout(t); res(); });
      child.kill('SIGTERM');
    }),
  };
}

const PROMPTS = [
  'def main(', 'import os\nimport sys\n', 'class Reader:\n    def __init__(self', 'for i in range(',
  'def _parse(self, s):\n', '# Copyright 2001 Python Software Foundation\n', "if __name__ == '__main__':\n", 'try:\n    import ',
];

// One streamed completion: {tokens, ttft_ms, ms}.
async function stream(url, prompt, maxTokens) {
  const t0 = performance.now();
  const r = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: maxTokens, temperature: 0, stream: true, stream_options: { include_usage: true } }),
    signal: AbortSignal.timeout(300000),
  });
  if (r.status !== 200) throw new Error(`HTTP ${r.status}: ${await r.text()}`);
  const dec = new TextDecoder();
  let buf = '';
  let ttft = null;
  let tokens = null;
  for await (const part of r.body) {
    buf += dec.decode(part, { stream: true });
    let k;
    while ((k = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, k);
      buf = buf.slice(k + 2);
      if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
      const j = JSON.parse(ev.slice(6));
      if (j.error) throw new Error(`stream error: ${j.error.message}`);
      if (ttft === null && j.choices?.[0]?.text) ttft = performance.now() - t0;
      if (j.usage) tokens = j.usage.completion_tokens;
    }
  }
  if (tokens === null) throw new Error('the stream ended without a usage chunk');
  return { tokens, ttft_ms: ttft ?? performance.now() - t0, ms: performance.now() - t0 };
}

async function rep(url, n, maxTokens) {
  const t0 = performance.now();
  const rs = await Promise.all(Array.from({ length: n }, (_, i) => stream(url, PROMPTS[i % PROMPTS.length], maxTokens)));
  const wall = (performance.now() - t0) / 1000;
  const tokens = rs.reduce((s, x) => s + x.tokens, 0);
  return {
    tok_s: tokens / wall,
    tokens,
    wall_s: wall,
    ttft_ms: median(rs.map((x) => x.ttft_ms)),
    stream_tok_s: median(rs.map((x) => x.tokens / (x.ms / 1000))),
  };
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const srv = o.url ? { url: o.url, stop: async () => {} } : await startServer(o);
  const info = await (await fetch(`${srv.url}/v1/models`, { signal: AbortSignal.timeout(10000) })).json();
  const model = info.data?.[0]?.id ?? '?';
  const rows = [];
  try {
    for (const n of o.conc) {
      await rep(srv.url, n, o.tokens); // warm-up
      const reps = [];
      for (let i = 0; i < o.reps; i++) reps.push(await rep(srv.url, n, o.tokens));
      rows.push({
        concurrency: n,
        tok_s: median(reps.map((r) => r.tok_s)),
        tok_s_reps: reps.map((r) => +r.tok_s.toFixed(1)),
        tokens: median(reps.map((r) => r.tokens)),
        ttft_ms: median(reps.map((r) => r.ttft_ms)),
        stream_tok_s: median(reps.map((r) => r.stream_tok_s)),
      });
    }
  } finally {
    await srv.stop();
  }
  const base = rows.find((r) => r.concurrency === 1)?.tok_s;
  for (const r of rows) r.ratio_to_1 = base ? r.tok_s / base : null;
  if (o.json) {
    process.stdout.write(`${JSON.stringify({ model, max_tokens: o.tokens, reps: o.reps, threads: o.url ? null : o.threads, rows })}\n`);
    return;
  }
  console.log(`model ${model}, ${o.tokens} tokens per stream, ${o.reps} repetitions (median), ${o.url ? o.url : `--threads ${o.threads}`}`);
  console.log('streams  agg tok/s  x 1-stream  tokens/rep  ttft ms  per-stream tok/s  reps tok/s');
  for (const r of rows) {
    console.log(`${String(r.concurrency).padStart(7)}  ${r.tok_s.toFixed(1).padStart(9)}  ${(r.ratio_to_1 ?? NaN).toFixed(2).padStart(10)}  ` +
      `${String(r.tokens).padStart(10)}  ${r.ttft_ms.toFixed(1).padStart(7)}  ${r.stream_tok_s.toFixed(1).padStart(16)}  ${r.tok_s_reps.join(' ')}`);
  }
}

main().catch((e) => die(e.stack || String(e)));
