// Bad input over raw HTTP and raw sockets: malformed and truncated JSON,
// wrong types, absurd numbers, invalid UTF-8, oversized bodies and headers,
// broken framing, slow-loris connections. Each gets the right 4xx (or a
// closed connection where HTTP allows no answer), and the server keeps
// serving normal requests throughout.
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';

import { get, post, rawRequest, sleep, startServer, waitIdle, withTimeout } from './lib.mjs';

const T = { timeout: 30000 };
const C = '/v1/completions';
const H = '/v1/chat/completions';

describe('bad input', () => {
  let srv;
  before(async () => {
    srv = await startServer({ model: 'codelm-py-Q8_0.gguf' });
  });
  after(async () => {
    const r = await srv?.stop();
    if (r) assert.equal(r.code, 0);
  });

  async function stillServing() {
    const r = await post(srv, C, { prompt: 'import', max_tokens: 3, temperature: 0 });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.usage.completion_tokens, 3);
  }

  async function expectError(route, body, status, code, param) {
    const r = await post(srv, route, body);
    const what = `${route} ${typeof body === 'string' ? body.slice(0, 60) : Buffer.isBuffer(body) ? 'bytes' : JSON.stringify(body).slice(0, 80)}`;
    assert.equal(r.status, status, `${what}: ${r.text}`);
    assert.equal(r.headers.get('content-type'), 'application/json', what);
    assert.equal(r.json?.error?.code, code, `${what}: ${r.text}`);
    assert.equal(typeof r.json.error.message, 'string');
    if (param !== undefined) assert.equal(r.json.error.param, param, what);
  }

  it('malformed, truncated and non-object JSON is 400 invalid_json', T, async () => {
    for (const body of ['{"prompt": "x",', '{"prompt": "abc', '', '[]', 'null', '"x"', '{"prompt":"x","temperature":NaN}',
      '{"prompt":"x","max_tokens":1e999}', '{"prompt":"x"} trailing', `{"prompt":${'['.repeat(100000)}${']'.repeat(100000)}}`]) {
      await expectError(C, body, 400, 'invalid_json');
      await expectError(H, body, 400, 'invalid_json');
    }
    await stillServing();
  });

  it('invalid UTF-8, lone surrogates and NUL are 400 invalid_json', T, async () => {
    const wrap = (bytes) => Buffer.concat([Buffer.from('{"prompt":"a'), Buffer.from(bytes), Buffer.from('","max_tokens":2}')]);
    for (const bytes of [[0xff, 0xfe], [0xc0, 0xaf], [0xed, 0xa0, 0x80], [0xe2, 0x82], [0x80]]) await expectError(C, wrap(bytes), 400, 'invalid_json');
    await expectError(C, '{"prompt":"a\\ud800b","max_tokens":2}', 400, 'invalid_json');
    await expectError(C, '{"prompt":"a\\u0000b","max_tokens":2}', 400, 'invalid_json');
    const chat = Buffer.concat([Buffer.from('{"messages":[{"role":"user","content":"'), Buffer.from([0xf8, 0x88, 0x80, 0x80, 0x80]), Buffer.from('"}]}')]);
    await expectError(H, chat, 400, 'invalid_json');
    // Valid multi-byte text is fine.
    const ok = await post(srv, C, { prompt: 'naïve → 日本語 🙂', max_tokens: 2 });
    assert.equal(ok.status, 200);
    await stillServing();
  });

  it('wrong types and absurd numbers are 400 naming the field', T, async () => {
    const cases = [
      ['max_tokens', -1, 'invalid_value'], ['max_tokens', 1e30, 'invalid_value'], ['max_tokens', 1e300, 'invalid_value'],
      ['max_tokens', 2.5, 'invalid_type'], ['max_tokens', '5', 'invalid_type'], ['max_tokens', 0, 'invalid_value'],
      ['temperature', 'hot', 'invalid_type'], ['temperature', -1, 'invalid_value'], ['temperature', 1e30, 'invalid_value'],
      ['top_p', 1.5, 'invalid_value'], ['top_k', -2, 'invalid_value'], ['min_p', -0.5, 'invalid_value'],
      ['seed', 1e30, 'invalid_value'], ['seed', 1.5, 'invalid_type'], ['seed', 'x', 'invalid_type'],
      ['presence_penalty', 5, 'invalid_value'], ['frequency_penalty', -3, 'invalid_value'], ['repeat_penalty', 0, 'invalid_value'],
      ['logprobs', 100, 'invalid_value'], ['logprobs', -1, 'invalid_value'], ['stream', 'yes', 'invalid_type'],
      ['stream_options', true, 'invalid_type'], ['stop', 5, 'invalid_type'], ['stop', ['a', 5], 'invalid_type'],
      ['stop', Array(20).fill('x'), 'invalid_value'], ['stop', 'x'.repeat(100000), 'invalid_value'],
      ['logit_bias', [], 'invalid_type'], ['logit_bias', { abc: 1 }, 'invalid_value'], ['logit_bias', { 5: 1000 }, 'invalid_value'],
      ['logit_bias', { '-5': 1 }, 'invalid_value'], ['prompt', {}, 'invalid_type'], ['prompt', [-1], 'invalid_type'],
      ['prompt', [99999999], 'invalid_value'], ['prompt', [], 'invalid_value'], ['prompt', [1.5], 'invalid_type'],
      ['model', 5, 'invalid_type'], ['n', '2', 'invalid_type'], ['n', 0, 'invalid_value'], ['user', 5, 'invalid_type'],
    ];
    for (const [k, v, code] of cases) await expectError(C, { prompt: 'x', max_tokens: 2, [k]: v }, 400, code, k);
    await expectError(C, { max_tokens: 2 }, 400, 'missing_field', 'prompt');
    const msg = [{ role: 'user', content: 'x' }];
    await expectError(H, { max_tokens: 2 }, 400, 'missing_field', 'messages');
    await expectError(H, { messages: 'hi' }, 400, 'invalid_type', 'messages');
    await expectError(H, { messages: [5] }, 400, 'invalid_type', 'messages[0]');
    await expectError(H, { messages: [{ role: 'user', content: 5 }] }, 400, 'invalid_type', 'messages[0].content');
    await expectError(H, { messages: [{ content: 'x' }] }, 400, 'missing_field', 'messages[0].role');
    await expectError(H, { messages: [{ role: 'user' }] }, 400, 'missing_field', 'messages[0].content');
    await expectError(H, { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }, 400, 'unsupported_content_part');
    await expectError(H, { messages: [{ role: 'tool', content: 'x' }] }, 400, 'missing_field', 'messages[0].tool_call_id');
    await expectError(H, { messages: msg, tools: [{ type: 'function', function: { name: 'f' } }] }, 400, 'unsupported_tools', 'tools');
    await expectError(H, { messages: msg, tools: [{ type: 'function', function: { name: 'a b' } }] }, 400, 'invalid_value', 'tools[0]');
    await expectError(H, { messages: msg, logprobs: true, top_logprobs: 100 }, 400, 'invalid_value', 'top_logprobs');
    await expectError(H, { messages: msg, logprobs: 'yes' }, 400, 'invalid_type', 'logprobs');
    await expectError(H, { messages: msg, tool_choice: 'required' }, 400, 'invalid_value', 'tool_choice');
    await expectError('/v1/embeddings', { input: 5 }, 400, 'invalid_type', 'input');
    await expectError('/v1/embeddings', { input: [] }, 400, 'invalid_value', 'input');
    await expectError('/v1/embeddings', { input: [[-1]] }, 400, 'invalid_value', 'input');
    await expectError('/v1/embeddings', { input: [[99999999]] }, 400, 'invalid_value', 'input');
    await expectError('/v1/embeddings', { input: 'x', encoding_format: 'hex' }, 400, 'invalid_value', 'encoding_format');
    await expectError('/v1/embeddings', { input: 'x', dimensions: 7 }, 400, 'unsupported_dimensions', 'dimensions');
    await expectError('/tokenize', { content: 5 }, 400, 'invalid_type', 'content');
    await expectError('/detokenize', { tokens: 'x' }, 400, 'invalid_type', 'tokens');
    await expectError('/detokenize', { tokens: [99999999] }, 400, 'invalid_value', 'tokens');
    await stillServing();
  });

  it('unknown top-level fields are refused with a 400 naming them, in each API\'s error shape', T, async () => {
    // OpenAI: the error object, code unknown_field, param the field.
    await expectError(C, { prompt: 'import', max_tokens: 2, frobnicate: { deep: [1, 2, { x: null }] } }, 400, 'unknown_field', 'frobnicate');
    await expectError(H, { messages: [{ role: 'user', content: 'x' }], max_tokens: 2, bogus_field: 1 }, 400, 'unknown_field', 'bogus_field');
    await expectError('/v1/embeddings', { input: 'x', bogus_field: 1 }, 400, 'unknown_field', 'bogus_field');
    await expectError('/tokenize', { content: 'x', bogus_field: 1 }, 400, 'unknown_field', 'bogus_field');
    await expectError('/detokenize', { tokens: [1], bogus_field: 1 }, 400, 'unknown_field', 'bogus_field');
    await expectError('/v1/responses', { input: 'x', max_output_tokens: 2, bogus_field: 1 }, 400, 'unknown_field', 'bogus_field');
    const oa = await post(srv, C, { prompt: 'import', max_tokens: 2, bogus_field: true });
    assert.match(oa.json.error.message, /'bogus_field' is not a field of this request/);
    assert.equal(oa.json.error.type, 'invalid_request_error');
    // Anthropic: {"type":"error","error":{"type":"invalid_request_error","message":"bogus_field: ..."}}
    const an = await post(srv, '/v1/messages', { model: srv.modelId, max_tokens: 2, messages: [{ role: 'user', content: 'x' }], bogus_field: 1 });
    assert.equal(an.status, 400, an.text);
    assert.equal(an.json.type, 'error');
    assert.equal(an.json.error.type, 'invalid_request_error');
    assert.match(an.json.error.message, /^bogus_field: Extra inputs are not permitted/);
    // Anthropic tool use: malformed tools, tool_choice and tool blocks are 400s naming the field.
    const turn = (content) => [{ role: 'user', content: 'x' }, { role: 'assistant', content }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'a' }] }];
    for (const [extra, re] of [[{ tools: {} }, /^tools: must be an array/], [{ tools: [null] }, /^tools\.0: must be an object/],
      [{ tools: [{ name: 'a b', input_schema: { type: 'object' } }] }, /^tools\.0\.name/], [{ tool_choice: 'any' }, /^tool_choice: must be/],
      [{ tool_choice: { type: 'some' } }, /^tool_choice\.type/], [{ messages: turn([{ type: 'tool_use', id: 'a', name: 'f', input: [] }]) }, /input: must be an object/],
      [{ messages: turn([{ type: 'tool_use', id: 5, name: 'f', input: {} }]) }, /\.id: must be a string/],
      [{ messages: turn([{ type: 'tool_use', id: 'a', name: 'f', input: {} }, { type: 'tool_use', id: 'a', name: 'f', input: {} }]) }, /used twice/]]) {
      const r = await post(srv, '/v1/messages', { model: srv.modelId, max_tokens: 2, messages: [{ role: 'user', content: 'x' }], ...extra });
      assert.equal(r.status, 400, r.text);
      assert.equal(r.json.error.type, 'invalid_request_error');
      assert.match(r.json.error.message, re);
    }
    // Ollama: {"error": "..."} and nothing else.
    for (const [route, body] of [['/api/generate', { model: srv.modelId, prompt: 'x', stream: false, bogus_field: 1 }],
      ['/api/chat', { model: srv.modelId, messages: [{ role: 'user', content: 'x' }], stream: false, bogus_field: 1 }]]) {
      const ol = await post(srv, route, body);
      assert.equal(ol.status, 400, `${route}: ${ol.text}`);
      assert.deepEqual(Object.keys(ol.json), ['error']);
      assert.match(ol.json.error, /'bogus_field' is not a field of this request/);
    }
    // Ollama tool calls: malformed tools and conversations are 400s naming the field, in the same shape.
    const call = (fn) => [{ role: 'user', content: 'x' }, { role: 'assistant', content: '', tool_calls: [{ function: fn }] }];
    for (const [extra, re] of [[{ tools: {} }, /'tools' must be an array/], [{ tools: [null] }, /'tools\[0\]' must be/],
      [{ messages: call({ name: 'f', arguments: '{}' }) }, /'messages\[1\]\.tool_calls\[0\]\.function\.arguments' must be an object/],
      [{ messages: call({ arguments: {} }) }, /'messages\[1\]\.tool_calls\[0\]\.function\.name'/],
      [{ messages: [{ role: 'tool', content: 'x', tool_name: '' }] }, /'messages\[0\]\.tool_name' must be/]]) {
      const ol = await post(srv, '/api/chat', { model: srv.modelId, messages: [{ role: 'user', content: 'x' }], stream: false, ...extra });
      assert.equal(ol.status, 400, ol.text);
      assert.deepEqual(Object.keys(ol.json), ['error']);
      assert.match(ol.json.error, re);
    }
    await stillServing();
  });

  it('known fields, null values and nested extras are accepted', T, async () => {
    // metadata and user change nothing; members of messages are the message parser's
    const c = await post(srv, H, { messages: [{ role: 'user', content: 'x', name: 'bob', whatever: 1 }], max_tokens: 2, metadata: { a: 'b' }, user: 'u' });
    assert.equal(c.status, 200, c.text);
    // JSON null means "not given", for a field this server does not know too.
    const n = await post(srv, C, { prompt: 'import', max_tokens: 2, temperature: null, stop: null, seed: null, frobnicate: null });
    assert.equal(n.status, 200, n.text);
  });

  it('wrong methods are 405 with Allow; unknown paths 404', T, async () => {
    const g = await get(srv, H);
    assert.equal(g.status, 405);
    assert.equal(g.headers.get('allow'), 'POST');
    const p = await post(srv, '/health', {});
    assert.equal(p.status, 405);
    assert.match(p.headers.get('allow'), /GET/);
    const d = await fetch(`${srv.url}/v1/models`, { method: 'DELETE', signal: AbortSignal.timeout(5000) });
    assert.equal(d.status, 405);
    await d.text();
    const u = await post(srv, '/v2/completions', { prompt: 'x' });
    assert.equal(u.status, 404);
  });

  it('oversized bodies and headers, broken framing: 4xx or a closed connection', T, async () => {
    // A declared size over the limit is refused before any body is read.
    let r = await rawRequest(srv.port, 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\nExpect: 100-continue\r\n\r\n');
    assert.equal(r.status, 413, r.text);
    r = await rawRequest(srv.port, 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n{"prompt":');
    assert.equal(r.status, 413, r.text);
    r = await rawRequest(srv.port, 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}');
    assert.equal(r.status, 400, r.text);
    r = await rawRequest(srv.port, 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n');
    assert.equal(r.status, 400, r.text);
    r = await rawRequest(srv.port, `GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(200000)}\r\n\r\n`);
    assert.ok(r.status === 431 || r.status === 413 || r.status === 400, `huge header: ${r.status}`);
    // Not HTTP at all: the connection is closed (with or without a 400).
    r = await rawRequest(srv.port, 'GARBAGE\r\n\r\n');
    assert.ok(r.closed && (r.status === 0 || r.status === 400), `garbage: ${r.status} ${r.closed}`);
    // A TLS hello holds no line end: it waits for the idle timeout, harmlessly.
    r = await rawRequest(srv.port, Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03, ...Array(32).fill(0)]), { timeoutMs: 500 });
    assert.equal(r.status, 0);
    // A body shorter than its Content-Length, then the client hangs up.
    r = await rawRequest(srv.port, 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"prompt":"x"', { halfClose: true, timeoutMs: 8000 });
    assert.ok(r.closed, 'closed after the half-close');
    await stillServing();
  });

  it('slow-loris connections do not block other clients', T, async () => {
    // 8 connections trickle a request header one byte every 150 ms for ~3 s
    // while normal requests keep being answered promptly.
    const head = 'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-Padding: aaaaaaaaaaaaaaaaaaaa';
    const socks = [];
    const opened = [];
    for (let i = 0; i < 8; i++) {
      const s = net.connect(srv.port, '127.0.0.1');
      s.on('error', () => {});
      socks.push(s);
      opened.push(new Promise((resolve) => s.once('connect', resolve)));
    }
    await withTimeout(Promise.all(opened), 5000, 'slow connections to open');
    let stop = false;
    const trickle = (async () => {
      for (let i = 0; i < 20 && !stop; i++) {
        for (const s of socks) if (!s.destroyed) s.write(head[i % head.length]);
        await sleep(150);
      }
    })();
    const lat = [];
    try {
      for (let i = 0; i < 5; i++) {
        const t0 = Date.now();
        await stillServing();
        const h = await get(srv, '/health');
        assert.equal(h.status, 200);
        lat.push(Date.now() - t0);
        await sleep(300);
      }
    } finally {
      stop = true;
      await trickle;
      for (const s of socks) s.destroy();
    }
    for (const ms of lat) assert.ok(ms < 5000, `request during slow-loris took ${ms} ms`);
    await waitIdle(srv, 5000);
    await stillServing();
  });
});
