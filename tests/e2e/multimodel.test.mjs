// Many models in one server under load: three models in a scratch store,
// `power serve` without --model and --max-loaded 2, eight concurrent clients
// picking models at random for 200 requests. Every answer equals the answer
// of a one-model server to the same request; loads and evictions are counted
// in /metrics; after everything is unloaded the resident size comes back to
// within 10% of what it was after a first round of the same clients.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { env, get, modelPath, post, prng, rssKb, sleep, startServer } from './lib.mjs';

const T = { timeout: 180000 };
const MODELS = [
  ['codelm:q8', 'codelm-py-Q8_0.gguf'],
  ['llama:q4', 'syn-llama-Q4_0.gguf'],
  ['qwen3:q8', 'syn-qwen3-Q8_0.gguf'],
];
const PROMPTS = ['def main(', 'import os\n', 'Once upon a time', 'class Parser:\n    def'];
const N_REQUESTS = 200;
const N_CLIENTS = 8;

const body = (model, p) => ({ model, prompt: PROMPTS[p], max_tokens: 8, temperature: 0 });

// A request on a connection of its own (closed after it): the server's
// connection threads come and go, so its resident size after the run is the
// models' and the registry's, not that of idle keep-alive connections.
function postOnce(srv, route, value, timeoutMs = 60000) {
  return new Promise((resolve, reject) => {
    const data = JSON.stringify(value);
    const req = http.request(srv.url + route, {
      method: 'POST', agent: false, timeout: timeoutMs,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data), connection: 'close' },
    }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => {
        let json = null;
        try { json = JSON.parse(text); } catch { /* not JSON */ }
        resolve({ status: res.statusCode, text, json });
      });
    });
    req.on('timeout', () => req.destroy(new Error(`timed out after ${timeoutMs} ms: POST ${route}`)));
    req.on('error', reject);
    req.end(data);
  });
}

describe('store serving under load', () => {
  let home;
  const want = new Map(); // model -> prompt index -> text

  before(async () => {
    home = mkdtempSync(path.join(os.tmpdir(), 'power-multimodel-'));
    const { bin } = env();
    for (const [name, file] of MODELS)
      execFileSync(bin, ['import', modelPath(file), '--name', name], { env: { ...process.env, POWER_HOME: home }, stdio: 'ignore' });
    // What each model answers alone.
    for (const [name, file] of MODELS) {
      const srv = await startServer({ model: file, args: ['--no-request-log'] });
      try {
        const texts = [];
        for (let p = 0; p < PROMPTS.length; p++) {
          const r = await post(srv, '/v1/completions', { ...body(undefined, p) });
          assert.equal(r.status, 200, r.text);
          texts.push(r.json.choices[0].text);
        }
        want.set(name, texts);
      } finally {
        await srv.stop();
      }
    }
  });
  after(() => { if (home) rmSync(home, { recursive: true, force: true }); });

  it('8 clients, 3 models, room for 2: every answer equals the one-model answer', T, async () => {
    const srv = await startServer({
      model: null,
      args: ['--max-loaded', '2', '--keep-alive', '-1', '--no-request-log', '--parallel', '4'],
      env: { POWER_HOME: home, POWER_MODEL: null },
    });
    try {
      const rnd = prng(25);
      let next = 0, mismatches = 0, limit = 0;
      const failures = [];
      const worker = async () => {
        for (;;) {
          const i = next++;
          if (i >= limit) return;
          const [name] = MODELS[Math.floor(rnd() * MODELS.length)];
          const p = Math.floor(rnd() * PROMPTS.length);
          const r = await postOnce(srv, '/v1/completions', body(name, p));
          if (r.status !== 200) { failures.push(`${name}: ${r.status} ${r.text}`); continue; }
          if (r.json.model !== name || r.json.choices[0].text !== want.get(name)[p]) mismatches++;
        }
      };
      const unloadAll = async () => {
        for (const [name] of MODELS) assert.equal((await postOnce(srv, `/v1/models/${name}/unload`, {})).status, 200);
        await sleep(500);
        assert.equal((await get(srv, '/v1/ps')).json.data.length, 0);
      };
      // A first round with the same clients (their connections, threads and
      // one-time allocations stay), everything unloaded: the baseline.
      limit = 3 * N_CLIENTS;
      await Promise.all(Array.from({ length: N_CLIENTS }, worker));
      await unloadAll();
      const rss0 = rssKb(srv.pid);
      next = 0;
      limit = N_REQUESTS;
      await Promise.all(Array.from({ length: N_CLIENTS }, worker));
      assert.deepEqual(failures, []);
      assert.equal(mismatches, 0);

      const m = await get(srv, '/metrics');
      const loads = [...m.text.matchAll(/^power_model_loads_total\{model="[^"]+"\} (\d+)$/gm)].reduce((a, x) => a + Number(x[1]), 0);
      const evictions = [...m.text.matchAll(/^power_model_evictions_total\{model="[^"]+"\} (\d+)$/gm)].reduce((a, x) => a + Number(x[1]), 0);
      assert.ok(loads > MODELS.length, `loads counted: ${loads}`);
      assert.ok(evictions > 0, `evictions counted: ${evictions}`);
      assert.match(m.text, /^power_models_loaded [12]$/m);
      assert.match(m.text, /^power_engine_requests_total (\d+)$/m);
      assert.ok(Number(/^power_engine_requests_total (\d+)$/m.exec(m.text)[1]) >= N_REQUESTS + 3 * N_CLIENTS);

      const ps = await get(srv, '/v1/ps');
      assert.ok(ps.json.data.length <= 2);
      await unloadAll();
      const rss1 = rssKb(srv.pid);
      assert.ok(rss1 <= rss0 * 1.10, `RSS after unloading ${rss1} KiB vs ${rss0} KiB after the first cycle`);
      console.log(`# ${N_REQUESTS} requests: ${loads} loads, ${evictions} evictions; RSS ${rss0} -> ${rss1} KiB`);
    } finally {
      await srv.stop();
    }
  });

  it('tokenize and detokenize choose their model; an unknown field is refused before any load', T, async () => {
    const srv = await startServer({ model: null, args: ['--no-request-log'], env: { POWER_HOME: home, POWER_MODEL: null } });
    try {
      for (const [route, body] of [['/v1/completions', { model: 'codelm:q8', prompt: 'x', bogus_field: 1 }],
        ['/tokenize', { model: 'codelm:q8', content: 'x', bogus_field: 1 }]]) {
        const r = await post(srv, route, body);
        assert.equal(r.status, 400, r.text);
        assert.equal(r.json.error.code, 'unknown_field');
        assert.equal(r.json.error.param, 'bogus_field');
      }
      const ol = await post(srv, '/api/chat', { model: 'codelm:q8', messages: [{ role: 'user', content: 'x' }], bogus_field: 1 });
      assert.equal(ol.status, 400, ol.text);
      assert.equal((await get(srv, '/v1/ps')).json.data.length, 0, 'nothing loaded for a refused request');
      const t = await post(srv, '/tokenize', { model: 'codelm:q8', content: 'def main(' });
      assert.equal(t.status, 200, t.text);
      assert.ok(t.json.tokens.length > 0);
      const d = await post(srv, '/detokenize', { model: 'codelm:q8', tokens: t.json.tokens });
      assert.equal(d.status, 200, d.text);
      assert.match(d.json.content, /def main\(/);
      const none = await post(srv, '/tokenize', { content: 'x' });
      assert.equal(none.status, 400, none.text);
      assert.equal(none.json.error.param, 'model');
    } finally {
      await srv.stop();
    }
  });
});
