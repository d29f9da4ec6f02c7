// The other APIs power serve speaks, each through its official client:
// Ollama's /api/* (the ollama package), Anthropic's Messages API
// (@anthropic-ai/sdk) and OpenAI's Responses API (openai). Greedy decoding
// makes streamed and non-streamed answers comparable byte for byte.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import Anthropic from '@anthropic-ai/sdk';
import { Ollama } from 'ollama';
import OpenAI from 'openai';

import { client, get, post, startServer } from './lib.mjs';

const T = { timeout: 60000 };
const msgs = [{ role: 'user', content: 'Name three colours.' }];

function checkDurations(r) {
  for (const k of ['total_duration', 'prompt_eval_duration', 'eval_duration', 'load_duration']) {
    assert.ok(Number.isInteger(r[k]) && r[k] >= 0, `${k} ${r[k]}`);
  }
  assert.ok(r.total_duration > 0);
  assert.ok(r.total_duration >= r.prompt_eval_duration + r.eval_duration - 1, 'durations add up');
  assert.ok(Number.isInteger(r.prompt_eval_count) && r.prompt_eval_count > 0);
}

describe('ollama client against power serve', () => {
  let srv;
  let ol;
  let model;
  before(async () => {
    srv = await startServer({ model: 'syn-qwen2-Q4_K_M.gguf', args: ['--parallel', '2'] });
    ol = new Ollama({ host: srv.url });
    model = srv.modelId;
  });
  after(async () => {
    const r = await srv?.stop();
    if (r) assert.equal(r.code, 0);
  });

  it('chat, non-streamed and streamed, agree under greedy decoding', T, async () => {
    const req = { model, messages: msgs, options: { num_predict: 8, temperature: 0 } };
    const r = await ol.chat({ ...req, stream: false });
    assert.equal(r.model, model);
    assert.equal(r.message.role, 'assistant');
    assert.equal(typeof r.message.content, 'string');
    assert.ok(r.message.content.length > 0);
    assert.equal(r.done, true);
    assert.equal(r.done_reason, 'length');
    assert.equal(r.eval_count, 8);
    assert.ok(!Number.isNaN(Date.parse(r.created_at)));
    checkDurations(r);
    let text = '';
    let last = null;
    let parts = 0;
    for await (const p of await ol.chat({ ...req, stream: true })) {
      parts++;
      text += p.message.content;
      last = p;
      if (!p.done) assert.equal(p.message.role, 'assistant');
    }
    assert.ok(parts >= 2, `streamed in ${parts} parts`);
    assert.equal(text, r.message.content);
    assert.equal(last.done, true);
    assert.equal(last.done_reason, 'length');
    assert.equal(last.eval_count, 8);
    checkDurations(last);
  });

  it('the server streams NDJSON unless told not to', T, async () => {
    const r = await post(srv, '/api/chat', { model, messages: msgs, options: { num_predict: 3, temperature: 0 } });
    assert.equal(r.status, 200);
    assert.match(r.headers.get('content-type'), /application\/x-ndjson/);
    const lines = r.text.trim().split('\n').map((l) => JSON.parse(l));
    assert.equal(lines.at(-1).done, true);
    assert.ok(lines.slice(0, -1).every((l) => l.done === false));
  });

  it('generate with the template, raw, and JSON output through the grammar', T, async () => {
    const g = await ol.generate({ model, prompt: 'Say hi.', stream: false, options: { num_predict: 6, temperature: 0 } });
    assert.equal(typeof g.response, 'string');
    assert.equal(g.done, true);
    assert.equal(g.eval_count, 6);
    checkDurations(g);
    let text = '';
    for await (const p of await ol.generate({ model, prompt: 'Say hi.', stream: true, options: { num_predict: 6, temperature: 0 } })) text += p.response;
    assert.equal(text, g.response);
    const raw = await ol.generate({ model, prompt: 'Say hi.', raw: true, stream: false, options: { num_predict: 6, temperature: 0 } });
    assert.ok(raw.prompt_eval_count < g.prompt_eval_count, 'raw has no template around the prompt');
    const j = await ol.generate({ model, prompt: 'hi', format: 'json', stream: false, options: { num_predict: 64, temperature: 0 } });
    assert.equal(j.done_reason, 'stop');
    assert.equal(typeof JSON.parse(j.response), 'object');
    const schema = { type: 'object', properties: { colour: { enum: ['red', 'green'] } }, required: ['colour'], additionalProperties: false };
    const s = await ol.chat({ model, messages: msgs, format: schema, stream: false, options: { num_predict: 64, temperature: 0 } });
    assert.equal(s.done_reason, 'stop');
    assert.ok(['red', 'green'].includes(JSON.parse(s.message.content).colour), s.message.content);
  });

  it('options are honoured: seed, stop, num_predict', T, async () => {
    const req = { model, messages: msgs, stream: false, options: { num_predict: 10, temperature: 1, seed: 42 } };
    const a = await ol.chat(req);
    const b = await ol.chat(req);
    assert.equal(a.message.content, b.message.content, 'same seed, same answer');
    const full = await ol.chat({ model, messages: msgs, stream: false, options: { num_predict: 10, temperature: 0 } });
    const word = full.message.content.trim().split(/\s+/)[1];
    assert.ok(word, `a second word in ${JSON.stringify(full.message.content)}`);
    const cut = await ol.chat({ model, messages: msgs, stream: false, options: { num_predict: 10, temperature: 0, stop: [word] } });
    assert.equal(cut.done_reason, 'stop');
    assert.ok(!cut.message.content.includes(word));
    assert.ok(full.message.content.startsWith(cut.message.content));
  });

  it('embed and embeddings', T, async () => {
    const e = await ol.embed({ model, input: ['red', 'green'] });
    assert.equal(e.model, model);
    assert.equal(e.embeddings.length, 2);
    const n = e.embeddings[0].length;
    assert.ok(n > 0);
    const norm = Math.hypot(...e.embeddings[0]);
    assert.ok(Math.abs(norm - 1) < 1e-3, `norm ${norm}`);
    assert.ok(e.prompt_eval_count >= 2);
    const one = await ol.embeddings({ model, prompt: 'red' });
    assert.equal(one.embedding.length, n);
    for (let i = 0; i < n; i++) assert.ok(Math.abs(one.embedding[i] - e.embeddings[0][i]) < 1e-6);
  });

  it('list, show, ps, version', T, async () => {
    const l = await ol.list();
    assert.equal(l.models.length, 1);
    assert.equal(l.models[0].name, `${model}:latest`);
    assert.match(l.models[0].digest, /^[0-9a-f]{64}$/);
    assert.ok(l.models[0].size > 0);
    assert.equal(l.models[0].details.format, 'gguf');
    const s = await ol.show({ model: `${model}:latest` });
    assert.ok(s.template.length > 0);
    assert.ok(s.model_info['power.context_length'] > 0);
    assert.ok(s.capabilities.includes('completion'));
    const p = await ol.ps();
    assert.equal(p.models[0].name, `${model}:latest`);
    assert.equal(p.models[0].context_length, s.model_info['power.context_length']);
    const v = await get(srv, '/api/version');
    assert.match(v.json.version, /^\d+\.\d+\.\d+/);
  });

  it('errors come as Ollama sends them', T, async () => {
    await assert.rejects(ol.chat({ model: 'no-such-model', messages: msgs, stream: false }),
      (e) => e.name === 'ResponseError' && e.status_code === 404 && /not found/.test(e.error));
    await assert.rejects(ol.chat({ model, messages: [{ role: 'user', content: 'x', images: ['aGk='] }], stream: false }),
      (e) => e.status_code === 400 && /images are not supported/.test(e.error));
    await assert.rejects(ol.chat({ model, messages: msgs, stream: false, options: { num_ctx: 7 } }),
      (e) => e.status_code === 400 && /num_ctx/.test(e.error));
    await assert.rejects(ol.chat({ model, messages: msgs, stream: false, options: { num_gpu: 1 } }),
      (e) => e.status_code === 400 && /num_gpu/.test(e.error));
    // Tools need a template with a tool-call format (tools_ollama.test.mjs); this model's own has none.
    await assert.rejects(ol.chat({ model, messages: msgs, stream: false, tools: [{ type: 'function', function: { name: 'f' } }] }),
      (e) => e.status_code === 400 && /'tools' is not supported for this model/.test(e.error));
    const r = await post(srv, '/api/chat', '{not json');
    assert.equal(r.status, 400);
    assert.deepEqual(Object.keys(r.json), ['error']);
    await assert.rejects(ol.pull({ model: 'x', stream: false }), (e) => e.status_code === 404 && /Unknown request URL/.test(e.error));
    const wrong = await get(srv, '/api/chat');
    assert.equal(wrong.status, 405);
    assert.deepEqual(Object.keys(wrong.json), ['error']);
    const load = await ol.chat({ model, messages: [], stream: false });
    assert.equal(load.done_reason, 'load');
  });
});

describe('anthropic client against power serve', () => {
  let srv;
  let an;
  let model;
  before(async () => {
    srv = await startServer({ model: 'syn-qwen2-Q4_K_M.gguf', args: ['--parallel', '2'], env: { POWER_API_KEYS: 'sk-ant-test' } });
    an = new Anthropic({ baseURL: srv.url, apiKey: 'sk-ant-test', maxRetries: 0, timeout: 30000 });
    model = srv.modelId;
  });
  after(async () => {
    const r = await srv?.stop();
    if (r) assert.equal(r.code, 0);
  });

  it('create, then stream: the text deltas reassembled equal the message', T, async () => {
    const req = { model, max_tokens: 8, temperature: 0, system: 'You are terse.', messages: msgs };
    const m = await an.messages.create(req);
    assert.equal(m.type, 'message');
    assert.equal(m.role, 'assistant');
    assert.match(m.id, /^msg_/);
    assert.equal(m.model, model);
    assert.equal(m.content.length, 1);
    assert.equal(m.content[0].type, 'text');
    assert.equal(m.stop_reason, 'max_tokens');
    assert.equal(m.usage.output_tokens, 8);
    assert.ok(m.usage.input_tokens > 0);
    const types = [];
    let text = '';
    for await (const ev of await an.messages.create({ ...req, stream: true })) {
      types.push(ev.type);
      if (ev.type === 'content_block_delta') text += ev.delta.text;
      if (ev.type === 'message_delta') {
        assert.equal(ev.delta.stop_reason, 'max_tokens');
        assert.equal(ev.usage.output_tokens, 8);
      }
    }
    assert.equal(text, m.content[0].text);
    assert.deepEqual(types.slice(0, 2), ['message_start', 'content_block_start']);
    assert.deepEqual(types.slice(-3), ['content_block_stop', 'message_delta', 'message_stop']);
    assert.ok(types.includes('content_block_delta'));
    const s = an.messages.stream(req);
    let deltas = '';
    s.on('text', (t) => { deltas += t; });
    const fin = await s.finalMessage();
    assert.equal(deltas, m.content[0].text);
    assert.equal(fin.content[0].text, m.content[0].text);
    assert.equal(fin.usage.output_tokens, 8);
  });

  it('stop_sequences, content blocks and count_tokens', T, async () => {
    const base = { model, max_tokens: 10, temperature: 0, messages: msgs };
    const full = await an.messages.create(base);
    const text = full.content[0].text;
    assert.ok(text.length > 8, text);
    const stop = text.slice(4, 8);
    const cut = await an.messages.create({ ...base, stop_sequences: ['zq-never-zq', stop] });
    assert.equal(cut.stop_reason, 'stop_sequence');
    assert.equal(cut.stop_sequence, stop);
    let streamed = null;
    for await (const ev of await an.messages.create({ ...base, stop_sequences: [stop], stream: true })) {
      if (ev.type === 'message_delta') streamed = ev.delta;
    }
    assert.deepEqual(streamed, { stop_reason: 'stop_sequence', stop_sequence: stop });
    assert.equal(cut.content[0].text, text.slice(0, text.indexOf(stop)));
    const blocks = await an.messages.create({ ...base, messages: [{ role: 'user', content: [{ type: 'text', text: 'Name three ' }, { type: 'text', text: 'colours.' }] }] });
    assert.equal(blocks.content[0].text, full.content[0].text, 'text blocks are one text');
    const c = await an.messages.countTokens({ model, messages: msgs });
    assert.equal(c.input_tokens, full.usage.input_tokens);
  });

  it('errors in Anthropic shape; x-api-key and Authorization both work', T, async () => {
    await assert.rejects(an.messages.create({ model, messages: msgs }),
      (e) => e instanceof Anthropic.BadRequestError && e.error.type === 'error' && e.error.error.type === 'invalid_request_error' && /max_tokens/.test(e.error.error.message));
    await assert.rejects(an.messages.create({ model: 'claude-nope', max_tokens: 4, messages: msgs }),
      (e) => e instanceof Anthropic.NotFoundError && e.error.error.type === 'not_found_error');
    // Tools need a template with a tool-call format (tools_anthropic.test.mjs); this model's own has none.
    await assert.rejects(an.messages.create({ model, max_tokens: 4, messages: msgs, tools: [{ name: 'f', input_schema: { type: 'object' } }] }),
      (e) => e.status === 400 && /'tools' is not supported for this model/.test(e.error.error.message));
    await assert.rejects(an.messages.create({ model, max_tokens: 4, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'aGk=' } }] }] }),
      (e) => e.status === 400 && /image/.test(e.error.error.message));
    const bad = new Anthropic({ baseURL: srv.url, apiKey: 'sk-wrong', maxRetries: 0 });
    await assert.rejects(bad.messages.create({ model, max_tokens: 4, messages: msgs }),
      (e) => e instanceof Anthropic.AuthenticationError && e.error.error.type === 'authentication_error');
    const viaBearer = await post(srv, '/v1/messages/count_tokens', { model, messages: msgs }, { headers: { authorization: 'Bearer sk-ant-test' } });
    assert.equal(viaBearer.status, 200);
    const none = await post(srv, '/v1/messages/count_tokens', { model, messages: msgs });
    assert.equal(none.status, 401);
    assert.equal(none.json.type, 'error');
  });
});

describe('openai responses against power serve', () => {
  let srv;
  let oc;
  let model;
  before(async () => {
    srv = await startServer({ model: 'syn-qwen2-Q4_K_M.gguf', args: ['--parallel', '2'], env: { POWER_API_KEYS: 'sk-a,sk-b' } });
    oc = client(srv, { apiKey: 'sk-a' });
    model = srv.modelId;
  });
  after(async () => {
    const r = await srv?.stop();
    if (r) assert.equal(r.code, 0);
  });

  it('create and stream agree; typed events in order', T, async () => {
    const req = { model, input: 'Name three colours.', instructions: 'Be terse.', max_output_tokens: 8, temperature: 0, user: 'u-1', metadata: { topic: 'colours' } };
    const r = await oc.responses.create(req);
    assert.equal(r.user, 'u-1');
    assert.deepEqual(r.metadata, { topic: 'colours' });
    assert.equal(r.object, 'response');
    assert.match(r.id, /^resp_/);
    assert.equal(r.status, 'incomplete');
    assert.equal(r.incomplete_details.reason, 'max_output_tokens');
    assert.equal(r.usage.output_tokens, 8);
    assert.equal(r.instructions, 'Be terse.');
    assert.ok(r.output_text.length > 0);
    const s = oc.responses.stream(req);
    const types = [];
    let deltas = '';
    s.on('event', (ev) => types.push(ev.type));
    s.on('response.output_text.delta', (ev) => { deltas += ev.delta; });
    const fin = await s.finalResponse();
    assert.equal(deltas, r.output_text);
    assert.equal(fin.output_text, r.output_text);
    assert.deepEqual(types.slice(0, 4), ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added']);
    assert.deepEqual(types.slice(-4), ['response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.incomplete']);
    const items = [];
    for await (const ev of await oc.responses.create({ ...req, input: [{ role: 'user', content: [{ type: 'input_text', text: 'Name three colours.' }] }], stream: true })) {
      items.push(ev);
    }
    assert.deepEqual(items.map((e) => e.sequence_number), items.map((_, i) => i));
    assert.equal(items.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join(''), r.output_text);
  });

  it('previous_response_id continues the conversation with prefix reuse; retrieve; per-key store', T, async () => {
    const first = await oc.responses.create({ model, input: 'Tell me about cats.', max_output_tokens: 12, temperature: 0 });
    const next = await oc.responses.create({ model, input: 'And dogs?', previous_response_id: first.id, max_output_tokens: 6, temperature: 0 });
    assert.equal(next.previous_response_id, first.id);
    assert.ok(next.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens,
      `${next.usage.input_tokens} input tokens hold the first turn (${first.usage.input_tokens} + ${first.usage.output_tokens})`);
    assert.ok(next.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens,
      `cached ${next.usage.input_tokens_details.cached_tokens} of the first turn's ${first.usage.input_tokens}`);
    const got = await oc.responses.retrieve(first.id);
    assert.equal(got.id, first.id);
    assert.equal(got.output_text, first.output_text);
    const other = client(srv, { apiKey: 'sk-b' });
    await assert.rejects(other.responses.retrieve(first.id), (e) => e instanceof OpenAI.NotFoundError);
    await assert.rejects(other.responses.create({ model, input: 'x', previous_response_id: first.id, max_output_tokens: 2 }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'previous_response_id');
    const unstored = await oc.responses.create({ model, input: 'x', store: false, max_output_tokens: 2 });
    await assert.rejects(oc.responses.retrieve(unstored.id), (e) => e.status === 404);
  });

  it('refused fields and bad input get a 400 naming them', T, async () => {
    // Function tools need a template with a tool-call format (tools_responses.test.mjs); this model's own has none.
    await assert.rejects(oc.responses.create({ model, input: 'x', tools: [{ type: 'function', name: 'f', parameters: {} }] }),
      (e) => e.status === 400 && e.param === 'tools' && e.code === 'unsupported_tools');
    await assert.rejects(oc.responses.create({ model, input: [{ type: 'function_call_output', call_id: 'c', output: 'o' }] }),
      (e) => e.status === 400 && e.param === 'input[0].call_id');
    await assert.rejects(oc.responses.create({ model, input: [{ type: 'item_reference', id: 'msg_1' }] }),
      (e) => e.status === 400 && e.code === 'unsupported_input_item');
    await assert.rejects(oc.responses.create({ model, input: 'x', max_output_tokens: 0 }),
      (e) => e.status === 400 && e.param === 'max_output_tokens');
  });
});

describe('responses store bounds', () => {
  let srv;
  before(async () => {
    srv = await startServer({ model: 'syn-qwen2-Q4_K_M.gguf', args: ['--responses-max', '2'], env: { POWER_API_KEYS: null } });
  });
  after(async () => {
    const r = await srv?.stop();
    if (r) assert.equal(r.code, 0);
  });

  it('--responses-max keeps the most recently used responses', T, async () => {
    const oc = client(srv);
    const ids = [];
    for (let i = 0; i < 3; i++) ids.push((await oc.responses.create({ input: `n${i}`, max_output_tokens: 2 })).id);
    await assert.rejects(oc.responses.retrieve(ids[0]), (e) => e.status === 404);
    assert.equal((await oc.responses.retrieve(ids[1])).id, ids[1]);
    assert.equal((await oc.responses.retrieve(ids[2])).id, ids[2]);
    // ids[1] was used after ids[2]: the next one evicts ids[2].
    await oc.responses.retrieve(ids[1]);
    ids.push((await oc.responses.create({ input: 'n3', max_output_tokens: 2 })).id);
    await assert.rejects(oc.responses.retrieve(ids[2]), (e) => e.status === 404);
    assert.equal((await oc.responses.retrieve(ids[1])).id, ids[1]);
  });
});
