// Function tools on the Responses API through the official OpenAI client
// (responses.create, responses.stream), over the same template, grammar
// and parser as chat completions: tool_choice "required" and a named
// function give valid function_call items even from a random-weight model
// (its text is adversarial; the grammar holds the calls to their
// schemas); streamed argument deltas rebuild the whole answer's arguments;
// a continuation with previous_response_id that sends only the
// function_call_output items (as the OpenAI Agents SDK continues) reaches
// the template, as does the same conversation sent whole; a template
// without a tool-call format and non-function tools are 400s. Templates
// come from the shared chat-templates folder through --chat-template-file.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import OpenAI from 'openai';

import { client, post } from './lib.mjs';
import { checkToolArgs, question, responsesTools, startToolServers, stopToolServers } from './tools_lib.mjs';

const T = { timeout: 90000 };
const { weather, search } = responsesTools;
const inputs = [question, 'Search the web for cats.', 'Oslo or Lima, this week?'];

const checkArgs = (name, args) => checkToolArgs(name, JSON.parse(args), args);

function checkCall(item) {
  assert.equal(item.type, 'function_call', JSON.stringify(item));
  assert.match(item.id, /^fc_[A-Za-z0-9]{24}$/);
  assert.match(item.call_id, /^call_[A-Za-z0-9]{24}$/);
  assert.equal(item.status, 'completed');
  return checkArgs(item.name, item.arguments);
}

/**
 * Streams a request with responses.stream and checks the events of every
 * item: added (a call with arguments ""), argument deltas, arguments.done,
 * item done, in order, numbered 0.. by sequence_number; returns the final
 * response, the events and the calls rebuilt from the deltas alone.
 */
async function streamed(oc, req) {
  const s = oc.responses.stream(req);
  const events = [];
  s.on('event', (ev) => events.push(ev));
  const fin = await s.finalResponse();
  assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i));
  assert.equal(events[0].type, 'response.created');
  assert.ok(['response.completed', 'response.incomplete'].includes(events.at(-1).type));
  const calls = [];
  let open = null;
  for (const ev of events) {
    if (ev.type === 'response.output_item.added' && ev.item.type === 'function_call') {
      assert.equal(open, null, 'one item at a time');
      assert.equal(ev.item.arguments, '');
      assert.equal(ev.item.status, 'in_progress');
      open = { index: ev.output_index, id: ev.item.id, call_id: ev.item.call_id, name: ev.item.name, deltas: '', fragments: 0 };
    } else if (ev.type === 'response.function_call_arguments.delta') {
      assert.ok(open && ev.output_index === open.index && ev.item_id === open.id, JSON.stringify(ev));
      open.deltas += ev.delta;
      open.fragments++;
    } else if (ev.type === 'response.function_call_arguments.done') {
      assert.ok(open && ev.output_index === open.index && ev.item_id === open.id);
      assert.equal(ev.arguments, open.deltas);
      assert.equal(ev.name, open.name);
    } else if (ev.type === 'response.output_item.done' && ev.item.type === 'function_call') {
      assert.ok(open && ev.output_index === open.index);
      assert.equal(ev.item.arguments, open.deltas);
      assert.equal(ev.item.call_id, open.call_id);
      calls.push(open);
      open = null;
    }
  }
  assert.equal(open, null);
  return { fin, events, calls };
}

describe('function tools on the responses API with the openai client', () => {
  let hermes; // syn-qwen2 with the Qwen2.5 template: <tool_call> JSON
  let coder;  // syn-qwen2 with the Qwen3-Coder template: <function=...><parameter=...>
  let plain;  // syn-qwen2 with its own template: no tool-call format

  before(async () => {
    ({ hermes, coder, plain } = await startToolServers(['hermes', 'coder', 'plain']));
  });

  after(() => stopToolServers([hermes, coder, plain]));

  for (const which of ['hermes', 'coder']) {
    it(`${which}: tool_choice required and a named function give valid function_call items, streamed and not`, T, async () => {
      const oc = client(which === 'hermes' ? hermes : coder);
      const choices = ['required', { type: 'function', name: 'search' }, { type: 'function', name: 'get_weather' }];
      let maxFragments = 0;
      for (const tool_choice of choices) {
        for (const input of inputs) {
          const req = { input, tools: [weather, search], tool_choice, parallel_tool_calls: false, temperature: 0, max_output_tokens: 200 };
          const r = await oc.responses.create(req);
          assert.equal(r.status, 'completed', JSON.stringify(r.output));
          assert.equal(r.output.length, 1, JSON.stringify(r.output));
          const item = r.output[0];
          checkCall(item);
          if (typeof tool_choice === 'object') assert.equal(item.name, tool_choice.name);
          assert.equal(r.output_text, '');
          assert.equal(r.parallel_tool_calls, false);
          assert.deepEqual(r.tool_choice, tool_choice);
          assert.deepEqual(r.tools.map((t) => t.name), ['get_weather', 'search']);
          // The same request streamed (temperature 0): the same call, its
          // arguments arriving as deltas that add up to the whole answer's.
          const s = await streamed(oc, req);
          assert.equal(s.calls.length, 1);
          assert.equal(s.calls[0].name, item.name);
          assert.equal(s.calls[0].deltas, item.arguments);
          const fi = s.fin.output[0];
          assert.equal(s.fin.output.length, 1);
          assert.equal(fi.arguments, item.arguments);
          assert.equal(fi.status, 'completed');
          // The SDK parses the arguments of a strict tool's calls.
          if (fi.name === 'get_weather') assert.deepEqual(fi.parsed_arguments, JSON.parse(item.arguments));
          assert.equal(s.fin.status, 'completed');
          maxFragments = Math.max(maxFragments, s.calls[0].fragments);
        }
      }
      // Hermes calls stream their arguments token by token; Qwen3-Coder's
      // arrive whole when the call closes (they are rebuilt as JSON).
      if (which === 'hermes') assert.ok(maxFragments > 1, `argument fragments: ${maxFragments}`);
      else assert.equal(maxFragments, 1);
    });
  }

  it('parallel calls under required: one function_call item per call, streamed as whole', T, async () => {
    const oc = client(hermes);
    for (const input of inputs) {
      const req = { input, tools: [weather, search], tool_choice: 'required', temperature: 0, max_output_tokens: 160 };
      const r = await oc.responses.create(req);
      assert.equal(r.parallel_tool_calls, true);
      assert.ok(r.output.length >= 1, JSON.stringify(r.output));
      assert.ok(r.output.every((o) => o.type === 'function_call'));
      // A random model may go on calling until max_output_tokens: then the
      // response is incomplete, and so is its last call.
      const whole = r.status === 'incomplete' ? r.output.slice(0, -1) : r.output;
      if (r.status === 'incomplete') assert.equal(r.output.at(-1).status, 'incomplete');
      for (const o of whole) checkCall(o);
      assert.equal(new Set(r.output.map((o) => o.call_id)).size, r.output.length);
      const s = await streamed(oc, req);
      assert.deepEqual(s.calls.map((c) => c.index), r.output.map((_, i) => i));
      assert.deepEqual(s.calls.map((c) => c.name), r.output.map((o) => o.name));
      assert.deepEqual(s.calls.map((c) => c.deltas), r.output.map((o) => o.arguments));
      assert.equal(s.fin.status, r.status);
    }
  });

  it('continuation: previous_response_id with only the function_call_output, and the same conversation sent whole', T, async () => {
    const oc = client(hermes);
    const tools = [weather];
    const q = question;
    const first = await oc.responses.create({ input: q, tools, tool_choice: 'required', parallel_tool_calls: false, temperature: 0, max_output_tokens: 120 });
    assert.equal(first.output.length, 1);
    const call = first.output[0];
    checkCall(call);
    // The stored response keeps its function_call item.
    const got = await oc.responses.retrieve(first.id);
    assert.deepEqual(got.output, first.output);
    // As the Agents SDK continues: the outputs of the calls, nothing else.
    const result = { type: 'function_call_output', call_id: call.call_id, output: '{"temp_c": 21, "sky": "clear"}' };
    const second = await oc.responses.create({ previous_response_id: first.id, input: [result], tools, temperature: 0, max_output_tokens: 8 });
    assert.equal(second.previous_response_id, first.id);
    assert.ok(['completed', 'incomplete'].includes(second.status));
    // The call and its output are in the prompt; the first turn's prompt is reused.
    assert.ok(second.usage.input_tokens > first.usage.input_tokens + 20,
      `${second.usage.input_tokens} vs ${first.usage.input_tokens}`);
    assert.ok(second.usage.input_tokens_details.cached_tokens > 0, JSON.stringify(second.usage));
    // The same conversation sent whole (the first output items as returned,
    // store off): the same prompt, token for token.
    const whole = await oc.responses.create({
      input: [{ role: 'user', content: q }, ...first.output, result], tools, temperature: 0, max_output_tokens: 8, store: false,
    });
    assert.equal(whole.usage.input_tokens, second.usage.input_tokens);
    assert.deepEqual(whole.output.map((o) => o.type), second.output.map((o) => o.type));
    assert.equal(whole.output_text, second.output_text);
    // The conversation goes on with a user message.
    const third = await oc.responses.create({ previous_response_id: second.id, input: 'Thanks. And Oslo?', tools, temperature: 0, max_output_tokens: 4 });
    assert.ok(third.usage.input_tokens > second.usage.input_tokens + second.usage.output_tokens,
      `${third.usage.input_tokens} vs ${second.usage.input_tokens} + ${second.usage.output_tokens}`);
    // A streamed continuation works the same way.
    const st = oc.responses.stream({ previous_response_id: first.id, input: [result], tools, temperature: 0, max_output_tokens: 8 });
    const sfin = await st.finalResponse();
    assert.equal(sfin.usage.input_tokens, second.usage.input_tokens);
    assert.equal(sfin.output_text, second.output_text);

    // Order and ids are checked: a continuation without the outputs, an
    // output for no call, an output given twice.
    await assert.rejects(oc.responses.create({ previous_response_id: first.id, input: 'hi', max_output_tokens: 2 }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'input' && e.message.includes(call.call_id));
    await assert.rejects(oc.responses.create({ previous_response_id: first.id, input: [{ ...result, call_id: 'call_nope' }], max_output_tokens: 2 }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'input[0].call_id');
    await assert.rejects(oc.responses.create({ previous_response_id: second.id, input: [result], max_output_tokens: 2 }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'input[0].call_id' && /already has its output/.test(e.message));
    await assert.rejects(oc.responses.create({ input: [{ type: 'function_call', call_id: 'c1', name: 'get_weather', arguments: {} }], max_output_tokens: 2 }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'input[0].arguments');
  });

  it('auto and none: text is a message item; none gives the template no tools', T, async () => {
    const oc = client(hermes);
    const r = await oc.responses.create({ input: inputs[0], tools: [weather], temperature: 0, max_output_tokens: 6 });
    assert.ok(r.output.length >= 1);
    for (const o of r.output) assert.ok(['message', 'function_call'].includes(o.type), JSON.stringify(o));
    const none = await oc.responses.create({ input: inputs[0], tools: [weather], tool_choice: 'none', temperature: 0, max_output_tokens: 4 });
    assert.deepEqual(none.output.map((o) => o.type), ['message']);
    assert.ok(none.usage.input_tokens < r.usage.input_tokens, `${none.usage.input_tokens} vs ${r.usage.input_tokens}`);
    assert.equal(none.tool_choice, 'none');
  });

  it('refused: a template without a tool-call format, non-function tools, tool_choice of other types', T, async () => {
    await assert.rejects(client(plain).responses.create({ input: 'x', tools: [weather], max_output_tokens: 2 }),
      (e) => e instanceof OpenAI.BadRequestError && e.code === 'unsupported_tools' && e.param === 'tools');
    const oc = client(hermes);
    const hosted = [{ type: 'web_search' }, { type: 'file_search', vector_store_ids: ['vs_1'] },
      { type: 'code_interpreter', container: { type: 'auto' } }, { type: 'mcp', server_label: 'x', server_url: 'https://example.com' },
      { type: 'custom', name: 'c' }];
    for (const t of hosted) {
      await assert.rejects(oc.responses.create({ input: 'x', tools: [weather, t], max_output_tokens: 2 }),
        (e) => e instanceof OpenAI.BadRequestError && e.code === 'unsupported_tool' && e.param === 'tools[1].type' && e.message.includes(t.type));
    }
    await assert.rejects(oc.responses.create({ input: 'x', tools: [weather], tool_choice: { type: 'web_search_preview' }, max_output_tokens: 2 }),
      (e) => e instanceof OpenAI.BadRequestError && e.code === 'unsupported_tool_choice');
    await assert.rejects(oc.responses.create({ input: 'x', tools: [weather], tool_choice: { type: 'function', name: 'nope' }, max_output_tokens: 2 }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'tool_choice');
    await assert.rejects(oc.responses.create({ input: 'x', tool_choice: 'required', max_output_tokens: 2 }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'tool_choice');
    await assert.rejects(oc.responses.create({ input: 'x', tools: [{ ...weather, name: 'bad name' }], max_output_tokens: 2 }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'tools[0]');
    await assert.rejects(oc.responses.create({ input: 'x', tools: [weather], text: { format: { type: 'json_object' } }, max_output_tokens: 2 }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'text.format');
    // strict reaches the grammar as on chat completions: a keyword it cannot enforce is a 400 only then.
    const uri = { type: 'function', name: 'fetch_page', parameters: { type: 'object', properties: { u: { type: 'string', format: 'uri' } }, required: ['u'] } };
    await assert.rejects(oc.responses.create({ input: 'x', tools: [{ ...uri, strict: true }], tool_choice: 'required', max_output_tokens: 2 }),
      (e) => e instanceof OpenAI.BadRequestError && e.code === 'unsupported_schema_keyword');
    const lenient = await oc.responses.create({ input: 'x', tools: [{ ...uri, strict: false }], tool_choice: 'required', max_output_tokens: 2 });
    assert.equal(lenient.object, 'response');
    // The error object is OpenAI's.
    const raw = await post(hermes, '/v1/responses', { input: 'x', tools: [{ type: 'web_search' }] });
    assert.equal(raw.status, 400);
    assert.equal(raw.json.error.type, 'invalid_request_error');
    assert.equal(raw.json.error.code, 'unsupported_tool');
  });
});
