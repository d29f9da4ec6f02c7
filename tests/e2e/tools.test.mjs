// Tool calls through the official OpenAI client: tool_choice "required" and
// a named function give valid tool_calls (streamed and not) even from a
// random-weight model, whose text is adversarial; a tool-result turn goes
// back through the template and the conversation continues; the SDK's
// runTools and parse helpers work; a template without a tool-call format
// is a 400. Templates come from the shared chat-templates folder through
// --chat-template-file (the Qwen2.5 <tool_call> format and Qwen3-Coder's).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import OpenAI from 'openai';

import { client } from './lib.mjs';
import { chatTools, checkToolArgs, msgs, startToolServers, stopToolServers } from './tools_lib.mjs';

const T = { timeout: 60000 };
const { weather, search } = chatTools;

const checkArgs = (name, args) => checkToolArgs(name, JSON.parse(args), args);

/** Streams a request and rebuilds the message as the SDK's users do. */
async function streamed(oc, req) {
  const calls = [];
  let content = '', reasoning = '', finish = null, sawRole = false, fragments = 0;
  for await (const ch of await oc.chat.completions.create({ ...req, stream: true })) {
    const c = ch.choices[0];
    if (!c) continue;
    if (c.delta?.role) sawRole = true;
    content += c.delta?.content ?? '';
    reasoning += c.delta?.reasoning_content ?? '';
    for (const tc of c.delta?.tool_calls ?? []) {
      if (!calls[tc.index]) {
        // OpenAI's order: the first delta of a call has its id, type and name.
        assert.ok(tc.id && tc.type === 'function' && tc.function?.name, JSON.stringify(tc));
        calls[tc.index] = { id: tc.id, name: tc.function.name, arguments: tc.function.arguments ?? '' };
      } else {
        assert.equal(tc.id, undefined);
        calls[tc.index].arguments += tc.function?.arguments ?? '';
        fragments++;
      }
    }
    finish = c.finish_reason ?? finish;
  }
  assert.ok(sawRole);
  return { calls, content, reasoning, finish, fragments };
}

describe('tool calls with the openai client', () => {
  let hermes; // syn-qwen2 with the Qwen2.5 template: <tool_call> JSON
  let coder;  // syn-qwen2 with the Qwen3-Coder template: <function=...><parameter=...>
  let plain;  // syn-qwen2 with its own template: no tool-call format
  let qwen3;  // syn-qwen2 with the Qwen3 template: <think> reasoning, enable_thinking

  before(async () => {
    ({ hermes, coder, plain, qwen3 } = await startToolServers(['hermes', 'coder', 'plain', 'qwen3']));
  });

  after(() => stopToolServers([hermes, coder, plain, qwen3]));

  for (const which of ['hermes', 'coder']) {
    it(`${which}: tool_choice required and a named function give valid tool_calls, streamed and not`, T, async () => {
      const oc = client(which === 'hermes' ? hermes : coder);
      const choices = ['required', { type: 'function', function: { name: 'search' } }];
      let maxFragments = 0;
      for (const tool_choice of choices) {
        for (let seed = 1; seed <= 4; seed++) {
          const req = { messages: msgs, tools: [weather, search], tool_choice, parallel_tool_calls: false, seed, max_tokens: 200 };
          const r = await oc.chat.completions.create(req);
          const m = r.choices[0].message;
          assert.equal(r.choices[0].finish_reason, 'tool_calls', JSON.stringify(r.choices[0]));
          assert.equal(m.tool_calls.length, 1, JSON.stringify(m));
          const tc = m.tool_calls[0];
          assert.match(tc.id, /^call_[A-Za-z0-9]{24}$/);
          assert.equal(tc.type, 'function');
          if (typeof tool_choice === 'object') assert.equal(tc.function.name, 'search');
          checkArgs(tc.function.name, tc.function.arguments);
          assert.ok(m.content === null || m.content === '', JSON.stringify(m.content));
          // The same seed streamed: the same call, arriving as deltas.
          const s = await streamed(oc, req);
          assert.equal(s.finish, 'tool_calls');
          assert.equal(s.calls.length, 1);
          assert.equal(s.calls[0].name, tc.function.name);
          assert.equal(s.calls[0].arguments, tc.function.arguments);
          assert.equal(s.content, '');
          maxFragments = Math.max(maxFragments, s.fragments);
        }
      }
      // Hermes calls stream their arguments token by token; Qwen3-Coder's
      // arrive whole when the call closes (they are rebuilt as JSON).
      if (which === 'hermes') assert.ok(maxFragments > 1, `argument fragments: ${maxFragments}`);
      else assert.equal(maxFragments, 1);
    });
  }

  it('parallel calls under required: every call valid, indexes in order', T, async () => {
    const oc = client(hermes);
    for (let seed = 10; seed < 13; seed++) {
      const req = { messages: msgs, tools: [weather, search], tool_choice: 'required', seed, max_tokens: 160 };
      const r = await oc.chat.completions.create(req);
      const c = r.choices[0];
      assert.ok(c.message.tool_calls.length >= 1, JSON.stringify(c));
      // A random model may go on calling until max_tokens: then "length",
      // and the last call has the arguments it got (as OpenAI's do).
      assert.ok(['tool_calls', 'length'].includes(c.finish_reason), c.finish_reason);
      const whole = c.finish_reason === 'length' ? c.message.tool_calls.slice(0, -1) : c.message.tool_calls;
      for (const tc of whole) checkArgs(tc.function.name, tc.function.arguments);
      const s = await streamed(oc, req);
      assert.deepEqual(s.calls.map((x) => x.name), c.message.tool_calls.map((x) => x.function.name));
      assert.deepEqual(s.calls.map((x) => x.arguments), c.message.tool_calls.map((x) => x.function.arguments));
    }
  });

  it('a tool-result turn goes through the template and the conversation continues', T, async () => {
    const oc = client(hermes);
    const first = await oc.chat.completions.create({ messages: msgs, tools: [weather], tool_choice: 'required', parallel_tool_calls: false, seed: 3, max_tokens: 120 });
    const am = first.choices[0].message;
    assert.equal(am.tool_calls.length, 1);
    const convo = [...msgs, am, { role: 'tool', tool_call_id: am.tool_calls[0].id, content: '{"temp_c": 21}' }];
    const second = await oc.chat.completions.create({ messages: convo, tools: [weather], max_tokens: 8, seed: 4 });
    // The assistant call and the tool result are in the prompt.
    assert.ok(second.usage.prompt_tokens > first.usage.prompt_tokens + 20,
      `${second.usage.prompt_tokens} vs ${first.usage.prompt_tokens}`);
    assert.equal(second.choices[0].message.role, 'assistant');
    assert.ok(['stop', 'length', 'tool_calls'].includes(second.choices[0].finish_reason));
    // tool_choice none: the template gets no tools, no calls are parsed.
    const none = await oc.chat.completions.create({ messages: convo, tools: [weather], tool_choice: 'none', max_tokens: 4 });
    assert.equal(none.choices[0].message.tool_calls, undefined);
    assert.ok(none.usage.prompt_tokens < second.usage.prompt_tokens);
    // A tool message without its call id is a 400 naming it.
    await assert.rejects(oc.chat.completions.create({ messages: [...msgs, am, { role: 'tool', content: 'x' }], max_tokens: 2 }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'messages[2].tool_call_id');
  });

  it('runTools calls the function and feeds its result back; parse gives parsed_arguments', T, async () => {
    const oc = client(hermes);
    const seen = [];
    const runner = oc.chat.completions.runTools({
      messages: msgs,
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
      max_tokens: 120,
      seed: 5,
      tools: [{
        type: 'function',
        function: {
          name: 'get_weather',
          description: 'Get the weather for a city',
          parameters: weather.function.parameters,
          parse: JSON.parse,
          function: (args) => { seen.push(args); return { temp_c: 21 }; },
        },
      }],
    });
    const result = await runner.finalFunctionToolCallResult();
    assert.equal(seen.length, 1);
    assert.ok(['Paris', 'Oslo', 'Lima'].includes(seen[0].city));
    assert.equal(result, '{"temp_c":21}');
    const toolMsg = runner.messages.find((m) => m.role === 'tool');
    assert.ok(toolMsg && toolMsg.tool_call_id);

    const strict = { type: 'function', function: { ...search.function, strict: true } };
    const p = await oc.chat.completions.parse({ messages: msgs, tools: [strict], tool_choice: 'required', parallel_tool_calls: false, seed: 6, max_tokens: 120 });
    const tc = p.choices[0].message.tool_calls[0];
    assert.equal(tc.function.name, 'search');
    assert.deepEqual(tc.function.parsed_arguments, checkArgs('search', tc.function.arguments));
  });

  it('auto: free text without calls stays content; errors name the field', T, async () => {
    const oc = client(hermes);
    const r = await oc.chat.completions.create({ messages: msgs, tools: [weather], max_tokens: 6, seed: 1 });
    assert.equal(typeof r.choices[0].message.content, 'string');
    assert.ok(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason));
    await assert.rejects(client(plain).chat.completions.create({ messages: msgs, tools: [weather], max_tokens: 2 }),
      (e) => e instanceof OpenAI.BadRequestError && e.code === 'unsupported_tools' && e.param === 'tools');
    await assert.rejects(oc.chat.completions.create({ messages: msgs, tools: [weather], tool_choice: { type: 'function', function: { name: 'nope' } }, max_tokens: 2 }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'tool_choice');
    await assert.rejects(oc.chat.completions.create({ messages: msgs, reasoning_effort: 'low', max_tokens: 2 }),
      (e) => e instanceof OpenAI.BadRequestError && e.code === 'unsupported_reasoning_effort');
    // A keyword the grammar cannot enforce: an error for a strict tool,
    // left to the client otherwise (the call is still a valid object).
    const lax = { name: 'f', parameters: { type: 'object', properties: { n: { type: 'integer', minimum: 1, maximum: 99, exclusiveMinimum: 0 } }, required: ['n'], patternProperties: { x: {} } } };
    await assert.rejects(oc.chat.completions.create({ messages: msgs, tools: [{ type: 'function', function: { ...lax, strict: true } }], tool_choice: 'required', max_tokens: 2 }),
      (e) => e instanceof OpenAI.BadRequestError && e.code === 'unsupported_schema_keyword' && /patternProperties|exclusiveMinimum/.test(e.message));
    const free = await oc.chat.completions.create({ messages: msgs, tools: [{ type: 'function', function: lax }], tool_choice: 'required', parallel_tool_calls: false, max_tokens: 200, temperature: 0 });
    const fc = free.choices[0].message.tool_calls;
    assert.equal(free.choices[0].finish_reason, 'tool_calls');
    assert.equal(fc.length, 1);
    assert.equal(fc[0].function.name, 'f');
    assert.equal(typeof JSON.parse(fc[0].function.arguments).n, 'number');
  });

  it('reasoning: <think> becomes reasoning_content; chat_template_kwargs reach the template', T, async () => {
    const oc = client(qwen3);
    // A grammar makes the random model write a reasoning block, then an answer.
    const grammar = 'root ::= "<think>\\nweigh " [a-z]{1,8} "\\n</think>\\n\\nThe answer is " [0-9]{1,3} "."';
    const req = { messages: msgs, grammar, max_tokens: 60, seed: 2 };
    const r = await oc.chat.completions.create(req);
    const m = r.choices[0].message;
    assert.match(m.reasoning_content, /^weigh [a-z]{1,8}\n$/, JSON.stringify(m));
    assert.match(m.content, /^The answer is [0-9]{1,3}\.$/, JSON.stringify(m));
    assert.equal(r.choices[0].finish_reason, 'stop');
    const s = await streamed(oc, req);
    assert.equal(s.reasoning, m.reasoning_content);
    assert.equal(s.content, m.content);
    // enable_thinking false: the template writes an empty think block into the prompt.
    const on = await oc.chat.completions.create({ messages: msgs, max_tokens: 1 });
    const off = await oc.chat.completions.create({ messages: msgs, max_tokens: 1, chat_template_kwargs: { enable_thinking: false } });
    assert.ok(off.usage.prompt_tokens > on.usage.prompt_tokens, `${off.usage.prompt_tokens} vs ${on.usage.prompt_tokens}`);
  });
});
