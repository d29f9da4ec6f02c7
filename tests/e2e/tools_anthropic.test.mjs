// Tool use through the official Anthropic client (/v1/messages): tool_choice
// any and a named tool give valid tool_use blocks (streamed and not) even
// from a random-weight model, as the grammar keeps its calls well formed;
// the streamed input_json_delta fragments rebuild the same input; a
// tool_result turn goes back through the template and the conversation
// continues; the SDK's stream helper assembles the tool_use; count_tokens
// counts the tools; a template without a tool-call format and server tools
// are 400s. The same templates as tools.test.mjs (--chat-template-file):
// Qwen2.5's <tool_call> JSON, whose arguments stream token by token, and
// Qwen3-Coder's <function=...>, whose input arrives whole.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import Anthropic from '@anthropic-ai/sdk';

import { post } from './lib.mjs';
import { anthropicTools, checkToolArgs, question, startToolServers, stopToolServers } from './tools_lib.mjs';

const T = { timeout: 90000 };
const { weather, search } = anthropicTools;
const ask = (text) => [{ role: 'user', content: text }];
const prompts = [question, 'Look up the news, safely.', 'Oslo, two days?'];

const checkInput = (name, v) => checkToolArgs(name, v);

/** Streams a request (raw events) and rebuilds its blocks, checking
 * Anthropic's event order on the way. */
async function streamed(an, req) {
  const blocks = [];
  const types = [];
  let open = -1, stop = null, fragments = 0;
  for await (const ev of await an.messages.create({ ...req, stream: true })) {
    types.push(ev.type);
    if (ev.type === 'content_block_start') {
      assert.equal(open, -1, 'a block starts while another is open');
      assert.equal(ev.index, blocks.length, 'block indexes count up from 0');
      open = ev.index;
      const b = ev.content_block;
      if (b.type === 'tool_use') {
        assert.match(b.id, /^toolu_[A-Za-z0-9]{24}$/);
        assert.deepEqual(b.input, {});
        blocks.push({ type: 'tool_use', id: b.id, name: b.name, json: '' });
      } else {
        assert.equal(b.type, 'text');
        blocks.push({ type: 'text', text: b.text });
      }
    } else if (ev.type === 'content_block_delta') {
      assert.equal(ev.index, open);
      const b = blocks[ev.index];
      if (ev.delta.type === 'input_json_delta') {
        assert.equal(b.type, 'tool_use');
        b.json += ev.delta.partial_json;
        fragments++;
      } else {
        assert.equal(ev.delta.type, 'text_delta');
        assert.equal(b.type, 'text');
        b.text += ev.delta.text;
      }
    } else if (ev.type === 'content_block_stop') {
      assert.equal(ev.index, open);
      open = -1;
    } else if (ev.type === 'message_delta') {
      stop = ev.delta.stop_reason;
      assert.ok(ev.usage.output_tokens > 0);
    }
  }
  assert.equal(types[0], 'message_start');
  assert.deepEqual(types.slice(-2), ['message_delta', 'message_stop']);
  assert.equal(open, -1, 'every block is closed');
  return { blocks, stop, fragments };
}

describe('tool use with the anthropic client', () => {
  let hermes; // syn-qwen2 with the Qwen2.5 template: <tool_call> JSON
  let coder;  // syn-qwen2 with the Qwen3-Coder template: <function=...><parameter=...>
  let plain;  // syn-qwen2 with its own template: no tool-call format
  const client = (srv) => new Anthropic({ baseURL: srv.url, apiKey: 'x', maxRetries: 0, timeout: 60000 });

  before(async () => {
    ({ hermes, coder, plain } = await startToolServers(['hermes', 'coder', 'plain']));
  });

  after(() => stopToolServers([hermes, coder, plain]));

  for (const which of ['hermes', 'coder']) {
    it(`${which}: tool_choice any and a named tool give a valid tool_use, streamed and not`, T, async () => {
      const srv = which === 'hermes' ? hermes : coder;
      const an = client(srv);
      const choices = [{ type: 'any', disable_parallel_tool_use: true }, { type: 'tool', name: 'search', disable_parallel_tool_use: true }];
      let maxFragments = 0;
      for (const tool_choice of choices) {
        for (const p of prompts) {
          const req = { model: srv.modelId, messages: ask(p), tools: [weather, search], tool_choice, temperature: 0, max_tokens: 200 };
          const m = await an.messages.create(req);
          assert.equal(m.stop_reason, 'tool_use', JSON.stringify(m));
          assert.equal(m.stop_sequence, null);
          const uses = m.content.filter((b) => b.type === 'tool_use');
          assert.equal(uses.length, 1, JSON.stringify(m.content));
          // Text, if any, comes first; the call is the last block.
          assert.equal(m.content.at(-1).type, 'tool_use');
          const u = uses[0];
          assert.match(u.id, /^toolu_[A-Za-z0-9]{24}$/);
          if (tool_choice.type === 'tool') assert.equal(u.name, 'search');
          checkInput(u.name, u.input);
          // Greedy decoding streamed: the same call, its input in fragments.
          const s = await streamed(an, req);
          assert.equal(s.stop, 'tool_use');
          const su = s.blocks.filter((b) => b.type === 'tool_use');
          assert.equal(su.length, 1);
          assert.equal(su[0].name, u.name);
          assert.deepEqual(JSON.parse(su[0].json), u.input);
          assert.deepEqual(s.blocks.filter((b) => b.type === 'text').map((b) => b.text),
            m.content.filter((b) => b.type === 'text').map((b) => b.text));
          maxFragments = Math.max(maxFragments, s.fragments);
        }
      }
      // Hermes calls stream their input token by token; Qwen3-Coder's
      // arrive whole when the call closes (they are rebuilt as JSON).
      if (which === 'hermes') assert.ok(maxFragments > 1, `input fragments: ${maxFragments}`);
      else assert.equal(maxFragments, 1);
    });
  }

  it('parallel calls under any: one tool_use block each, indexes in order, streamed as whole', T, async () => {
    const an = client(hermes);
    for (const p of prompts) {
      const req = { model: hermes.modelId, messages: ask(p), tools: [weather, search], tool_choice: { type: 'any' }, temperature: 0, max_tokens: 160 };
      const m = await an.messages.create(req);
      const uses = m.content.filter((b) => b.type === 'tool_use');
      assert.ok(uses.length >= 1, JSON.stringify(m));
      // A random model may go on calling until max_tokens: then the last
      // call is cut off (its input is {} here; its stream sent what it got).
      assert.ok(['tool_use', 'max_tokens'].includes(m.stop_reason), m.stop_reason);
      const whole = m.stop_reason === 'max_tokens' ? uses.slice(0, -1) : uses;
      for (const u of whole) checkInput(u.name, u.input);
      assert.equal(new Set(uses.map((u) => u.id)).size, uses.length, 'ids are unique');
      const s = await streamed(an, req);
      assert.equal(s.stop, m.stop_reason);
      const su = s.blocks.filter((b) => b.type === 'tool_use');
      assert.deepEqual(su.map((x) => x.name), uses.map((x) => x.name));
      assert.deepEqual(su.slice(0, whole.length).map((x) => JSON.parse(x.json)), whole.map((x) => x.input));
    }
  });

  it('a tool_result turn goes through the template and the conversation continues; count_tokens counts the tools', T, async () => {
    const an = client(hermes);
    const model = hermes.modelId;
    const first = await an.messages.create({ model, messages: ask(prompts[0]), tools: [weather], tool_choice: { type: 'tool', name: 'get_weather' }, temperature: 0, max_tokens: 120 });
    assert.equal(first.stop_reason, 'tool_use');
    const use = first.content.find((b) => b.type === 'tool_use');
    const convo = [...ask(prompts[0]), { role: 'assistant', content: first.content },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '{"temp_c": 21}' }, { type: 'text', text: 'And tomorrow?' }] }];
    const second = await an.messages.create({ model, messages: convo, tools: [weather], max_tokens: 8, temperature: 0 });
    // The assistant's call and the result are in the prompt.
    assert.ok(second.usage.input_tokens > first.usage.input_tokens + 20, `${second.usage.input_tokens} vs ${first.usage.input_tokens}`);
    assert.equal(second.role, 'assistant');
    assert.ok(['end_turn', 'max_tokens', 'tool_use'].includes(second.stop_reason), second.stop_reason);
    // count_tokens renders the same prompt, tools included.
    const counted = await an.messages.countTokens({ model, messages: convo, tools: [weather] });
    assert.equal(counted.input_tokens, second.usage.input_tokens);
    const bare = await an.messages.countTokens({ model, messages: convo });
    assert.ok(bare.input_tokens < counted.input_tokens, `${bare.input_tokens} vs ${counted.input_tokens}`);
    // tool_choice none: the template gets no tools, no calls are parsed.
    const none = await an.messages.create({ model, messages: convo, tools: [weather], tool_choice: { type: 'none' }, max_tokens: 4 });
    assert.ok(none.content.every((b) => b.type === 'text'));
    assert.equal(none.usage.input_tokens, bare.input_tokens);
    // An error result in text blocks: the template shows it as text.
    const errTurn = [...convo.slice(0, 2), { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, is_error: true, content: [{ type: 'text', text: 'city unknown' }] }] }];
    const third = await an.messages.create({ model, messages: errTurn, tools: [weather], max_tokens: 2 });
    assert.ok(third.usage.input_tokens > first.usage.input_tokens);
    // A result for a call that was not made, or with no call before it: 400.
    const wrongId = [...convo.slice(0, 2), { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_nope', content: 'x' }] }];
    await assert.rejects(an.messages.create({ model, messages: wrongId, tools: [weather], max_tokens: 2 }),
      (e) => e instanceof Anthropic.BadRequestError && /toolu_nope/.test(e.error.error.message));
    await assert.rejects(an.messages.create({ model, messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'x' }] }], max_tokens: 2 }),
      (e) => e instanceof Anthropic.BadRequestError && /must follow an assistant turn with tool_use/.test(e.error.error.message));
    // A call without its result is refused, as Anthropic refuses it.
    await assert.rejects(an.messages.create({ model, messages: [...convo.slice(0, 2), { role: 'user', content: 'go on' }], max_tokens: 2 }),
      (e) => e instanceof Anthropic.BadRequestError && e.error.error.message.includes(use.id));
  });

  it('the SDK stream helper assembles the tool_use as the whole answer has it', T, async () => {
    const an = client(hermes);
    const req = { model: hermes.modelId, messages: ask(prompts[2]), tools: [weather, search], tool_choice: { type: 'tool', name: 'get_weather' }, temperature: 0, max_tokens: 120 };
    const whole = await an.messages.create(req);
    const s = an.messages.stream(req);
    let json = '';
    s.on('inputJson', (delta) => { json += delta; });
    const fin = await s.finalMessage();
    assert.equal(fin.stop_reason, 'tool_use');
    const u = fin.content.find((b) => b.type === 'tool_use');
    assert.equal(u.name, 'get_weather');
    checkInput(u.name, u.input);
    assert.deepEqual(JSON.parse(json), u.input);
    assert.deepEqual(u.input, whole.content.find((b) => b.type === 'tool_use').input);
    assert.equal(fin.usage.output_tokens, whole.usage.output_tokens);
  });

  it('auto answers with text blocks; a template without a tool-call format, server tools and bad tools are 400s', T, async () => {
    const an = client(hermes);
    const model = hermes.modelId;
    const auto = await an.messages.create({ model, messages: ask(prompts[0]), tools: [weather], max_tokens: 6, temperature: 0 });
    assert.ok(auto.content.length >= 1);
    assert.ok(['end_turn', 'max_tokens', 'tool_use'].includes(auto.stop_reason), auto.stop_reason);
    const isBad = (re) => (e) => e instanceof Anthropic.BadRequestError && e.error.type === 'error' &&
      e.error.error.type === 'invalid_request_error' && re.test(e.error.error.message);
    await assert.rejects(client(plain).messages.create({ model: plain.modelId, messages: ask('x'), tools: [weather], max_tokens: 2 }),
      isBad(/tools.*not supported for this model/));
    await assert.rejects(client(plain).messages.countTokens({ model: plain.modelId, messages: ask('x'), tools: [weather] }),
      isBad(/tools.*not supported for this model/));
    for (const tool of [{ type: 'web_search_20250305', name: 'web_search', max_uses: 2 }, { type: 'bash_20250124', name: 'bash' }]) {
      await assert.rejects(an.messages.create({ model, messages: ask('x'), tools: [weather, tool], max_tokens: 2 }),
        isBad(new RegExp(`tools\\.1: '${tool.type}' tools \\(Anthropic's server tools\\) are not supported`)));
    }
    await assert.rejects(an.messages.create({ model, messages: ask('x'), tools: [{ name: 'f', input_schema: { type: 'string' } }], max_tokens: 2 }),
      isBad(/tools\.0\.input_schema/));
    await assert.rejects(an.messages.create({ model, messages: ask('x'), tools: [weather], tool_choice: { type: 'tool', name: 'nope' }, max_tokens: 2 }),
      isBad(/tool_choice\.name: 'nope'/));
    await assert.rejects(an.messages.create({ model, messages: ask('x'), tool_choice: { type: 'any' }, max_tokens: 2 }),
      isBad(/tool_choice: type 'any' needs tools/));
    const many = Array.from({ length: 129 }, (_, i) => ({ name: `t${i}`, input_schema: { type: 'object' } }));
    await assert.rejects(an.messages.create({ model, messages: ask('x'), tools: many, max_tokens: 2 }), isBad(/at most 128 tools/));
    // Schema keywords the grammar cannot honour are named for a strict
    // tool, and left to the client otherwise.
    const lax = { name: 'f', input_schema: { type: 'object', patternProperties: { x: {} } } };
    await assert.rejects(an.messages.create({ model, messages: ask('x'), tools: [{ ...lax, strict: true }], tool_choice: { type: 'any' }, max_tokens: 2 }),
      isBad(/patternProperties/));
    const ok = await an.messages.create({ model, messages: ask('x'), tools: [lax], tool_choice: { type: 'any' }, max_tokens: 2 });
    assert.equal(ok.type, 'message');
    // The raw body: the error shape has nothing else.
    const raw = await post(hermes, '/v1/messages', { model, max_tokens: 2, messages: ask('x'), tools: [{ type: 'computer_20250124', name: 'computer' }] });
    assert.equal(raw.status, 400);
    assert.deepEqual(Object.keys(raw.json).sort(), ['error', 'type']);
  });
});
