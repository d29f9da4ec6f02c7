// The official OpenAI client against power serve: chat and completions
// (streamed and not), usage, stop strings, seeds, logprobs, models,
// embeddings, and the typed errors the client raises for 400/401/404/413.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import OpenAI from 'openai';

import { client, drain, get, post, startServer } from './lib.mjs';

const T = { timeout: 30000 };
const chatMsgs = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'Name three colours.' },
];

function checkUsage(u, maxCompletion) {
  assert.ok(u, 'usage present');
  assert.ok(Number.isInteger(u.prompt_tokens) && u.prompt_tokens > 0, `prompt_tokens ${u.prompt_tokens}`);
  assert.ok(Number.isInteger(u.completion_tokens) && u.completion_tokens >= 1 && u.completion_tokens <= maxCompletion,
    `completion_tokens ${u.completion_tokens}`);
  assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
  const cached = u.prompt_tokens_details?.cached_tokens;
  assert.ok(Number.isInteger(cached) && cached >= 0 && cached <= u.prompt_tokens, `cached_tokens ${cached}`);
}

describe('openai client against power serve', () => {
  let chat; // syn-qwen2: has a chat template
  let code; // codelm-py: trained, produces real text
  let oc;
  let cc;

  before(async () => {
    [chat, code] = await Promise.all([
      startServer({ model: 'syn-qwen2-Q4_K_M.gguf', args: ['--parallel', '2'] }),
      startServer({ model: 'codelm-py-Q8_0.gguf', args: ['--parallel', '2'] }),
    ]);
    oc = client(chat);
    cc = client(code);
  });

  after(async () => {
    const r = await Promise.all([chat?.stop(), code?.stop()]);
    for (const x of r) if (x) assert.equal(x.code, 0, `power serve exit ${JSON.stringify(x)}`);
  });

  it('chat completion, non-streamed and streamed, agree under greedy decoding', T, async () => {
    const req = { model: chat.modelId, messages: chatMsgs, max_tokens: 8, temperature: 0 };
    const r = await oc.chat.completions.create(req);
    assert.equal(r.object, 'chat.completion');
    assert.match(r.id, /^chatcmpl-[A-Za-z0-9]{24}$/);
    assert.equal(r.model, chat.modelId);
    assert.equal(r.choices.length, 1);
    assert.equal(r.choices[0].index, 0);
    assert.equal(r.choices[0].message.role, 'assistant');
    assert.equal(typeof r.choices[0].message.content, 'string');
    assert.equal(r.choices[0].finish_reason, 'length');
    checkUsage(r.usage, 8);
    assert.equal(r.usage.completion_tokens, 8);

    const s = await oc.chat.completions.create({ ...req, stream: true });
    const d = await drain(s, 'chat');
    assert.equal(d.chunks[0].choices[0].delta.role, 'assistant');
    for (const ch of d.chunks) {
      assert.equal(ch.object, 'chat.completion.chunk');
      assert.equal(ch.id, d.chunks[0].id);
    }
    assert.equal(d.text, r.choices[0].message.content);
    assert.equal(d.finish, 'length');
    assert.equal(d.usage, null, 'no usage chunk without stream_options.include_usage');

    const su = await oc.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
    const du = await drain(su, 'chat');
    const last = du.chunks.at(-1);
    assert.deepEqual(last.choices, [], 'the usage chunk has no choices');
    assert.deepEqual(du.usage, r.usage);
    assert.equal(du.text, r.choices[0].message.content);
  });

  it('text completion, non-streamed and streamed, with usage', T, async () => {
    const req = { model: code.modelId, prompt: 'def __init__(self', max_tokens: 16, temperature: 0 };
    const r = await cc.completions.create(req);
    assert.equal(r.object, 'text_completion');
    assert.match(r.id, /^cmpl-/);
    assert.ok(r.choices[0].text.length > 0);
    checkUsage(r.usage, 16);
    const s = await cc.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
    const d = await drain(s, 'completion');
    assert.equal(d.text, r.choices[0].text);
    assert.equal(d.finish, r.choices[0].finish_reason);
    assert.deepEqual(d.usage, r.usage);
    // The same prompt given as token ids gives the same text.
    const tok = await post(code, '/tokenize', { content: req.prompt, add_special: true });
    assert.equal(tok.status, 200);
    const ids = await cc.completions.create({ ...req, prompt: tok.json.tokens });
    assert.equal(ids.choices[0].text, r.choices[0].text);
    assert.equal(ids.usage.prompt_tokens, r.usage.prompt_tokens);
  });

  it('max_tokens past the context is capped to it (finish_reason length)', T, async () => {
    // codelm-py: 256-token context; EOS (</s>, id 2) banned so it runs to the end.
    const r = await cc.completions.create({ prompt: 'def main(', max_tokens: 1000, temperature: 0, logit_bias: { 2: -100 } });
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.usage.total_tokens, 256);
  });

  it('tokenize and detokenize round-trip', T, async () => {
    const text = 'import os\nprint(os.getcwd())\n';
    const t = await post(code, '/tokenize', { content: text, with_pieces: true });
    assert.equal(t.status, 200);
    assert.ok(t.json.tokens.length > 3);
    // SentencePiece adds its dummy prefix space to the first piece.
    assert.equal(t.json.tokens.map((x) => x.piece).join(''), ` ${text}`);
    const d = await post(code, '/detokenize', { tokens: t.json.tokens.map((x) => x.id) });
    assert.equal(d.status, 200);
    // The dummy prefix space stays, as in llama.cpp's /detokenize.
    assert.equal(d.json.content, ` ${text}`);
  });

  it('a stop string taken from the greedy output trims it and finishes with stop', T, async () => {
    const req = { prompt: 'class Reader:\n    def __init__(self', max_tokens: 40, temperature: 0 };
    const full = (await cc.completions.create(req)).choices[0].text;
    assert.ok(full.length > 24, `greedy output long enough: ${JSON.stringify(full)}`);
    const stop = full.slice(12, 17);
    const at = full.indexOf(stop);
    assert.ok(at >= 1 && at <= 12);
    const want = full.slice(0, at);
    for (const stream of [false, true]) {
      const opts = { ...req, stop: ['@@never@@', stop], stream };
      if (stream) opts.stream_options = { include_usage: true };
      const r = await cc.completions.create(opts);
      const got = stream ? await drain(r, 'completion') : { text: r.choices[0].text, finish: r.choices[0].finish_reason, usage: r.usage };
      assert.equal(got.text, want, `stream=${stream}: text before the stop string`);
      assert.equal(got.finish, 'stop', `stream=${stream}`);
      assert.ok(got.usage.completion_tokens < 40, `stream=${stream}: stopped early`);
    }
    // Chat too, on the chat model.
    const creq = { messages: chatMsgs, max_tokens: 24, temperature: 0 };
    const cfull = (await oc.chat.completions.create(creq)).choices[0].message.content;
    assert.ok(cfull.length > 10);
    const cstop = cfull.slice(6, 9);
    const cat = cfull.indexOf(cstop);
    const c = await oc.chat.completions.create({ ...creq, stop: cstop });
    assert.equal(c.choices[0].message.content, cfull.slice(0, cat));
    assert.equal(c.choices[0].finish_reason, 'stop');
  });

  it('a seed makes sampling reproducible; other seeds differ', T, async () => {
    const req = { prompt: 'def parse(self, text):\n', max_tokens: 24, temperature: 0.8 };
    const a = (await cc.completions.create({ ...req, seed: 42 })).choices[0].text;
    const b = (await cc.completions.create({ ...req, seed: 42 })).choices[0].text;
    assert.equal(a, b);
    const s = await drain(await cc.completions.create({ ...req, seed: 42, stream: true }), 'completion');
    assert.equal(s.text, a, 'streamed with the same seed');
    const others = [];
    for (const seed of [1, 2, 3]) others.push((await cc.completions.create({ ...req, seed })).choices[0].text);
    assert.ok(others.some((o) => o !== a), `different seeds all gave ${JSON.stringify(a)}`);
    const c1 = await oc.chat.completions.create({ messages: chatMsgs, max_tokens: 12, temperature: 0.8, seed: 7 });
    const c2 = await oc.chat.completions.create({ messages: chatMsgs, max_tokens: 12, temperature: 0.8, seed: 7 });
    assert.equal(c1.choices[0].message.content, c2.choices[0].message.content);
  });

  it('chat logprobs and top_logprobs have the OpenAI shape', T, async () => {
    const r = await oc.chat.completions.create({ messages: chatMsgs, max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 3 });
    const lp = r.choices[0].logprobs.content;
    assert.equal(lp.length, 5);
    for (const x of lp) {
      assert.equal(typeof x.token, 'string');
      assert.ok(x.logprob <= 0 && Number.isFinite(x.logprob));
      assert.deepEqual(x.bytes, [...Buffer.from(x.token, 'utf8')]);
      assert.equal(x.top_logprobs.length, 3);
      for (let i = 1; i < 3; i++) assert.ok(x.top_logprobs[i - 1].logprob >= x.top_logprobs[i].logprob, 'sorted');
      // Greedy: the chosen token is the most likely one.
      assert.equal(x.top_logprobs[0].token, x.token);
      assert.ok(Math.abs(x.top_logprobs[0].logprob - x.logprob) < 1e-4);
    }
    assert.equal(lp.map((x) => x.token).join(''), r.choices[0].message.content);

    const s = await drain(await oc.chat.completions.create({ messages: chatMsgs, max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 2, stream: true }), 'chat');
    const streamed = s.chunks.filter((c) => c.choices[0]?.logprobs).flatMap((c) => c.choices[0].logprobs.content);
    assert.equal(streamed.length, 5);
    assert.deepEqual(streamed.map((x) => x.token), lp.map((x) => x.token));
    for (const x of streamed) assert.equal(x.top_logprobs.length, 2);

    const n = await oc.chat.completions.create({ messages: chatMsgs, max_tokens: 2, logprobs: false });
    assert.equal(n.choices[0].logprobs, null);
  });

  it('completion logprobs have the legacy shape', T, async () => {
    const r = await cc.completions.create({ prompt: 'import ', max_tokens: 6, temperature: 0, logprobs: 2 });
    const lp = r.choices[0].logprobs;
    assert.equal(lp.tokens.length, 6);
    assert.equal(lp.token_logprobs.length, 6);
    assert.equal(lp.top_logprobs.length, 6);
    assert.equal(lp.text_offset.length, 6);
    assert.equal(lp.tokens.join(''), r.choices[0].text);
    let off = 0;
    for (let i = 0; i < 6; i++) {
      assert.equal(lp.text_offset[i], off);
      off += Buffer.byteLength(lp.tokens[i]);
      assert.ok(lp.token_logprobs[i] <= 0);
      const alts = Object.entries(lp.top_logprobs[i]);
      assert.ok(alts.length >= 1 && alts.length <= 2);
      assert.ok(Math.abs(Math.max(...alts.map((a) => a[1])) - lp.token_logprobs[i]) < 1e-4);
    }
  });

  it('models.list and models.retrieve', T, async () => {
    const l = await oc.models.list();
    assert.equal(l.data.length, 1);
    assert.equal(l.data[0].id, chat.modelId);
    assert.equal(l.data[0].object, 'model');
    const m = await oc.models.retrieve(chat.modelId);
    assert.equal(m.id, chat.modelId);
    await assert.rejects(oc.models.retrieve('no-such-model'), (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
  });

  it('embeddings: the client default (base64) and float agree', T, async () => {
    const a = await oc.embeddings.create({ model: chat.modelId, input: 'hello world' });
    assert.equal(a.object, 'list');
    const v = a.data[0].embedding;
    assert.equal(v.length, 128, 'n_embd of syn-qwen2');
    assert.ok(v.every(Number.isFinite));
    assert.ok(a.usage.prompt_tokens > 0);
    const f = await oc.embeddings.create({ model: chat.modelId, input: 'hello world', encoding_format: 'float' });
    const w = f.data[0].embedding;
    assert.equal(w.length, v.length);
    for (let i = 0; i < v.length; i++) assert.ok(Math.abs(v[i] - w[i]) <= 1e-6 * Math.max(1, Math.abs(v[i])), `dim ${i}: ${v[i]} vs ${w[i]}`);
    const two = await oc.embeddings.create({ input: ['hello world', 'something else'], encoding_format: 'float' });
    assert.deepEqual(two.data.map((d) => d.index), [0, 1]);
    assert.deepEqual(two.data[0].embedding, w, 'same input, same vector');
    assert.notDeepEqual(two.data[1].embedding, w);
  });

  it('400s come back as BadRequestError with code and param', T, async () => {
    const bad = async (p, code, param, api = oc.chat.completions) => {
      await assert.rejects(api.create(p), (e) => {
        assert.ok(e instanceof OpenAI.BadRequestError, `${e.constructor.name}: ${e.message}`);
        assert.equal(e.status, 400);
        assert.equal(e.code, code);
        if (param !== undefined) assert.equal(e.param, param);
        return true;
      });
    };
    const base = { messages: chatMsgs, max_tokens: 2 };
    await bad({ ...base, temperature: 5 }, 'invalid_value', 'temperature');
    await bad({ ...base, max_tokens: 0 }, 'invalid_value', 'max_tokens');
    await bad({ ...base, n: 65 }, 'invalid_value', 'n');
    await bad({ ...base, chat_template_kwargs: { enable_thinking: false } }, 'unsupported_chat_template_kwargs', 'chat_template_kwargs');
    await bad({ ...base, tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }] }, 'unsupported_tools', 'tools');
    await bad({ ...base, response_format: { type: 'json_schema', json_schema: { name: 's', schema: { type: 'object', patternProperties: { x: {} } } } } }, 'unsupported_schema_keyword');
    await bad({ ...base, response_format: { type: 'xml' } }, 'invalid_value', 'response_format.type');
    await bad({ ...base, top_logprobs: 3 }, 'invalid_value', 'top_logprobs');
    await bad({ max_tokens: 2, messages: [] }, 'invalid_value', 'messages');
    await bad({ max_tokens: 2, messages: [{ role: 'wizard', content: 'x' }] }, 'invalid_value', 'messages[0].role');
    await bad({ prompt: 'x', echo: true }, 'unsupported_echo', 'echo', cc.completions);
    await bad({ prompt: 'x', best_of: 3 }, 'unsupported_best_of', 'best_of', cc.completions);
    // Context overflow: codelm-py has a 256-token context.
    await bad({ prompt: 'x = 1\n'.repeat(200), max_tokens: 4 }, 'context_length_exceeded', 'prompt', cc.completions);
    await bad({ messages: [{ role: 'user', content: 'x = 1\n'.repeat(200) }], max_tokens: 4 }, 'context_length_exceeded', 'messages', cc.chat.completions);
    await assert.rejects(cc.embeddings.create({ input: 'x = 1\n'.repeat(200) }), (e) => e.status === 400 && e.code === 'context_length_exceeded');
  });

  it('json_schema and json_object output parses and fits the schema (constrained decoding)', T, async () => {
    const schema = {
      type: 'object',
      properties: { ok: { type: 'boolean' }, n: { type: 'integer', minimum: 0, maximum: 9 }, tag: { enum: ['a', 'b'] } },
      required: ['ok', 'n', 'tag'],
      additionalProperties: false,
    };
    for (const stream of [false, true]) {
      const req = {
        messages: chatMsgs, max_tokens: 96, temperature: 0,
        response_format: { type: 'json_schema', json_schema: { name: 'answer', strict: true, schema } },
      };
      let text = '', finish = null;
      if (stream) {
        for await (const ch of await oc.chat.completions.create({ ...req, stream: true })) {
          text += ch.choices[0]?.delta?.content ?? '';
          finish = ch.choices[0]?.finish_reason ?? finish;
        }
      } else {
        const r = await oc.chat.completions.create(req);
        text = r.choices[0].message.content;
        finish = r.choices[0].finish_reason;
      }
      assert.equal(finish, 'stop', `stream=${stream}: ${text}`);
      const v = JSON.parse(text);
      assert.deepEqual(Object.keys(v).sort(), ['n', 'ok', 'tag']);
      assert.equal(typeof v.ok, 'boolean');
      assert.ok(Number.isInteger(v.n) && v.n >= 0 && v.n <= 9, text);
      assert.ok(['a', 'b'].includes(v.tag), text);
    }
    const r = await oc.chat.completions.create({ messages: chatMsgs, max_tokens: 96, temperature: 0, response_format: { type: 'json_object' } });
    if (r.choices[0].finish_reason === 'stop') assert.equal(typeof JSON.parse(r.choices[0].message.content), 'object');
    else assert.equal(r.choices[0].finish_reason, 'length');
  });

  it('404 for an unknown model and an unknown URL', T, async () => {
    await assert.rejects(oc.chat.completions.create({ model: 'gpt-4o', messages: chatMsgs, max_tokens: 2 }),
      (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found');
    await assert.rejects(oc.embeddings.create({ model: 'text-embedding-3-small', input: 'x' }),
      (e) => e instanceof OpenAI.NotFoundError);
    const u = await get(chat, '/v1/nothing-here');
    assert.equal(u.status, 404);
    assert.equal(u.json.error.code, 'unknown_url');
  });

  it('413 for a chunked body over the limit', T, async () => {
    // No Content-Length: the server reads up to its limit, drops the rest, answers 413.
    let sent = 0;
    const body = new ReadableStream({
      pull(c) {
        if (sent++ < 300) c.enqueue(new TextEncoder().encode('a'.repeat(32768)));
        else c.close();
      },
    });
    const r = await fetch(`${code.url}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body, duplex: 'half', signal: AbortSignal.timeout(20000),
    });
    assert.equal(r.status, 413);
    assert.equal((await r.json()).error.code, 'request_too_large');
    const ok = await cc.completions.create({ prompt: 'import', max_tokens: 2 });
    assert.equal(ok.choices.length, 1);
  });

  it('413 for a body whose Content-Length is over the limit', T, async () => {
    const big = JSON.stringify({ prompt: 'a'.repeat(9 << 20), max_tokens: 1 });
    const r = await post(code, '/v1/completions', big);
    assert.equal(r.status, 413);
    assert.equal(r.json.error.code, 'request_too_large');
    await assert.rejects(cc.completions.create({ prompt: 'b'.repeat(9 << 20), max_tokens: 1 }),
      (e) => e instanceof OpenAI.APIError && e.status === 413);
  });
});

describe('API keys', () => {
  let srv;
  let dir;
  before(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'power-e2e-'));
    writeFileSync(path.join(dir, 'keys'), '# keys\n\n  sk-first  \nsk-second\n');
    srv = await startServer({ model: 'codelm-py-Q8_0.gguf', args: ['--api-key-file', path.join(dir, 'keys')], env: { POWER_API_KEYS: null } });
  });
  after(async () => {
    const r = await srv?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
    if (r) assert.equal(r.code, 0);
  });

  it('401 without or with a wrong key; either listed key works; /health is public', T, async () => {
    const req = { prompt: 'import', max_tokens: 2 };
    await assert.rejects(client(srv, { apiKey: 'sk-wrong' }).completions.create(req),
      (e) => e instanceof OpenAI.AuthenticationError && e.status === 401 && e.code === 'invalid_api_key');
    await assert.rejects(client(srv, { apiKey: 'sk-firs' }).models.list(), (e) => e.status === 401);
    await assert.rejects(client(srv, { apiKey: 'sk-first-and-more' }).models.list(), (e) => e.status === 401);
    for (const route of ['/v1/models', '/metrics']) {
      const r = await get(srv, route);
      assert.equal(r.status, 401, route);
      assert.equal(r.headers.get('www-authenticate'), 'Bearer');
    }
    const n = await post(srv, '/v1/completions', req);
    assert.equal(n.status, 401);
    assert.equal(n.json.error.type, 'authentication_error');
    for (const key of ['sk-first', 'sk-second']) {
      const r = await client(srv, { apiKey: key }).completions.create(req);
      assert.equal(r.choices.length, 1, key);
    }
    const h = await get(srv, '/health');
    assert.equal(h.status, 200);
    assert.equal(h.json.status, 'ok');
  });
});
