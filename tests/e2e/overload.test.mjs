// Overload: with one slot and one queue place, a third request is refused at
// once with 503 and Retry-After while the admitted stream carries on
// unharmed; a queued request whose X-Request-Timeout passes gets 408.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import OpenAI from 'openai';

import { client, metrics, post, sleep, startServer, waitIdle, withTimeout } from './lib.mjs';

// Tokens of the long stream (context 2048). Greedy decoding makes them in
// about 1 s on syn-qwen2, close to what the steps that need it running take;
// with logprobs (a top-k over the vocabulary per token) they take several.
const LONG = 2000;

describe('overload with --parallel 1 --queue 1', () => {
  let srv;
  let oc;
  before(async () => {
    srv = await startServer({ model: 'syn-qwen2-Q4_K_M.gguf', args: ['--parallel', '1', '--queue', '1'] });
    oc = client(srv, { timeout: 60000 });
  });
  after(async () => {
    const r = await srv?.stop();
    if (r) assert.equal(r.code, 0);
  });

  // Starts a long greedy stream; resolves once its first content arrived,
  // with .done (the rest of it) and .abort().
  async function longStream(maxTokens) {
    const s = await oc.completions.create({ prompt: 'Once upon a time', max_tokens: maxTokens, temperature: 0, logprobs: 5, stream: true, stream_options: { include_usage: true } });
    const it = s[Symbol.asyncIterator]();
    let text = '';
    let chunks = 0;
    for (;;) {
      const { value, done } = await withTimeout(it.next(), 20000, 'first chunk of the long stream');
      assert.ok(!done, 'the long stream ended before any content');
      chunks++;
      if (value.choices[0]?.text) {
        text += value.choices[0].text;
        break;
      }
    }
    const state = { finished: false };
    const done = (async () => {
      let finish = null;
      let usage = null;
      for (;;) {
        const { value, done: end } = await it.next();
        if (end) break;
        chunks++;
        if (value.usage) usage = value.usage;
        const c = value.choices[0];
        if (c?.text) text += c.text;
        if (c?.finish_reason) finish = c.finish_reason;
      }
      state.finished = true;
      return { text, finish, usage, chunks };
    })();
    done.catch(() => {});
    return { done, state, abort: () => s.controller.abort() };
  }

  async function waitQueued(n) {
    for (let i = 0; i < 200; i++) {
      const m = await metrics(srv);
      if (m.power_queue_depth === n) return;
      await sleep(10);
    }
    throw new Error(`queue depth never reached ${n}`);
  }

  it('503 with Retry-After at once; the admitted stream and the queued request complete', { timeout: 90000 }, async (t) => {
    const a = await longStream(LONG);
    // B waits in the only queue place.
    const b = oc.completions.create({ prompt: 'Hello', max_tokens: 4, temperature: 0 });
    b.catch(() => {});
    await waitQueued(1);

    const times = [];
    for (const kind of ['completion', 'chat', 'stream']) {
      const t0 = Date.now();
      const p = kind === 'chat'
        ? oc.chat.completions.create({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 })
        : oc.completions.create({ prompt: 'Hi', max_tokens: 4, stream: kind === 'stream' });
      await assert.rejects(withTimeout(p, 10000, `${kind} refusal`), (e) => {
        assert.ok(e instanceof OpenAI.APIError, `${e.constructor.name}: ${e.message}`);
        assert.equal(e.status, 503, kind);
        assert.equal(e.code, 'overloaded');
        assert.equal(e.headers.get('retry-after'), '1');
        return true;
      });
      times.push(Date.now() - t0);
    }
    const raw = await post(srv, '/v1/completions', { prompt: 'Hi', max_tokens: 4 });
    assert.equal(raw.status, 503);
    assert.equal(raw.headers.get('retry-after'), '1');
    assert.equal(raw.json.error.type, 'server_overloaded');
    t.diagnostic(`503 refusals took ${times.join(', ')} ms`);
    // Generous bound: a refusal must not wait for the running stream.
    for (const ms of times) assert.ok(ms < 5000, `refusal took ${ms} ms`);
    assert.equal(a.state.finished, false, 'the long stream was still running during the refusals (make LONG larger)');

    const ra = await withTimeout(a.done, 60000, 'the long stream');
    assert.equal(ra.finish, 'length');
    assert.equal(ra.usage.completion_tokens, LONG);
    assert.ok(ra.text.length > 0);
    const rb = await withTimeout(b, 30000, 'the queued request');
    assert.equal(rb.usage.completion_tokens, 4);
    const m = await metrics(srv);
    assert.ok(m.power_requests_rejected_total >= 4);
    await waitIdle(srv, 10000);
  });

  it('a queued request whose X-Request-Timeout passes gets 408', { timeout: 90000 }, async (t) => {
    const a = await longStream(LONG);
    for (const stream of [false, true]) {
      const t0 = Date.now();
      await assert.rejects(
        withTimeout(oc.completions.create({ prompt: 'Hi', max_tokens: 4, stream }, { headers: { 'X-Request-Timeout': '0.3' } }), 20000, '408'),
        (e) => {
          assert.equal(e.status, 408, `stream=${stream}: ${e.message}`);
          assert.equal(e.code, 'timeout');
          return true;
        });
      const ms = Date.now() - t0;
      t.diagnostic(`stream=${stream}: 408 after ${ms} ms`);
      assert.ok(ms >= 250 && ms < 5000, `408 after ${ms} ms`);
    }
    assert.equal(a.state.finished, false, 'the long stream was still running (make LONG larger)');
    const bad = await post(srv, '/v1/completions', { prompt: 'Hi', max_tokens: 4 }, { headers: { 'X-Request-Timeout': 'soon' } });
    assert.equal(bad.status, 400);
    assert.equal(bad.json.error.param, 'X-Request-Timeout');
    a.abort();
    await waitIdle(srv, 10000);
    const ok = await oc.completions.create({ prompt: 'Hi', max_tokens: 4, temperature: 0 });
    assert.equal(ok.usage.completion_tokens, 4);
  });
});
