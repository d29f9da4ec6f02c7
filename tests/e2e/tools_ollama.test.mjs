// Tool calls on Ollama's /api/chat through the official ollama client,
// with random-weight models and the shared templates (--chat-template-file:
// Qwen2.5's <tool_call> format, Mistral Nemo's [TOOL_CALLS] with its
// 9-character call ids). Ollama has no tool_choice, so a random model is
// free never to call: nothing here waits for one. What is checked: the
// tools reach the template (prompt counts); streamed and whole answers
// agree, and any call the model writes is whole, valid and shaped as
// Ollama's (id, function.index, name, arguments an object); a call and
// its result go back through the template (their arguments and content
// are counted; Mistral's template refuses ids that are not 9 characters,
// so the ids given to calls without one are checked by the template
// itself); errors come in Ollama's shape. The rendering of calls the model
// writes (whole, and streamed as one chunk per call) runs on fixed texts in
// tests/unit/test_server_e2e.c (test_ollama_tools), through the same
// renderers.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { Ollama } from 'ollama';

import { chatTools, checkToolArgs, msgs, startToolServers, stopToolServers } from './tools_lib.mjs';

const T = { timeout: 60000 };
const { weather, search } = chatTools;

/** A call as Ollama returns it; its arguments valid for its tool. */
function checkCall(tc, index) {
  assert.match(tc.id, /^call_[A-Za-z0-9]{8}$/, JSON.stringify(tc));
  assert.equal(tc.function.index, index, JSON.stringify(tc));
  checkToolArgs(tc.function.name, tc.function.arguments);
}

/** A streamed chat rebuilt as a client does: content, calls, the last chunk. */
async function streamed(ol, req) {
  let content = '', last = null, chunks = 0;
  const calls = [];
  for await (const ch of await ol.chat({ ...req, stream: true })) {
    chunks++;
    assert.equal(ch.message.role, 'assistant');
    content += ch.message.content;
    for (const tc of ch.message.tool_calls ?? []) calls.push(tc);
    // A call comes whole, alone in its chunk, never as argument fragments.
    if (ch.message.tool_calls) assert.equal(ch.message.tool_calls.length, 1);
    if (ch.done) last = ch;
  }
  assert.ok(last, 'a final chunk');
  return { content, calls, last, chunks };
}

describe('tool calls with the ollama client', () => {
  let hermes; // syn-qwen2 with the Qwen2.5 template: <tool_call> JSON
  let mistral; // syn-qwen2 with Mistral Nemo's template: ids of 9 alphanumerics
  let plain; // syn-qwen2 with its own template: no tool-call format
  const ol = (s) => new Ollama({ host: s.url });

  before(async () => {
    ({ hermes, mistral, plain } = await startToolServers(['hermes', 'mistral', 'plain']));
  });

  after(() => stopToolServers([hermes, mistral, plain]));

  it('the tools reach the template; show lists the tools capability', T, async () => {
    const o = ol(hermes);
    const model = hermes.modelId;
    const bare = await o.chat({ model, messages: msgs, stream: false, options: { num_predict: 1 } });
    const one = await o.chat({ model, messages: msgs, tools: [weather], stream: false, options: { num_predict: 1 } });
    const two = await o.chat({ model, messages: msgs, tools: [weather, search], stream: false, options: { num_predict: 1 } });
    // The template writes each tool's JSON into the system turn.
    assert.ok(one.prompt_eval_count > bare.prompt_eval_count + 40, `${one.prompt_eval_count} vs ${bare.prompt_eval_count}`);
    assert.ok(two.prompt_eval_count > one.prompt_eval_count + 20, `${two.prompt_eval_count} vs ${one.prompt_eval_count}`);
    // A tool left without "type" is the same tool (Ollama's clients may omit it).
    const untyped = await o.chat({ model, messages: msgs, tools: [{ function: weather.function }], stream: false, options: { num_predict: 1 } });
    assert.equal(untyped.prompt_eval_count, one.prompt_eval_count);
    assert.ok((await o.show({ model })).capabilities.includes('tools'));
    assert.ok(!(await ol(plain).show({ model: plain.modelId })).capabilities.includes('tools'));
  });

  it('under auto, streamed and whole answers agree; any call is whole and valid', T, async () => {
    const o = ol(hermes);
    for (let seed = 1; seed <= 4; seed++) {
      const req = { model: hermes.modelId, messages: msgs, tools: [weather, search], options: { seed, num_predict: 24, temperature: 1 } };
      const r = await o.chat({ ...req, stream: false });
      assert.equal(r.message.role, 'assistant');
      assert.equal(typeof r.message.content, 'string');
      assert.equal(r.message.thinking, undefined);
      assert.ok(['stop', 'length'].includes(r.done_reason), r.done_reason);
      (r.message.tool_calls ?? []).forEach(checkCall);
      // The opener of a call never shows as content: a call is parsed or
      // (cut off by num_predict) left out.
      assert.ok(!r.message.content.includes('<tool_call>\n{"name": "'), r.message.content);
      const s = await streamed(o, req);
      assert.equal(s.content, r.message.content);
      assert.deepEqual(s.calls.map((c) => c.function), (r.message.tool_calls ?? []).map((c) => c.function));
      assert.equal(s.last.done_reason, r.done_reason);
      assert.equal(s.last.eval_count, r.eval_count);
    }
  });

  it('a call and its result go back through the template', T, async () => {
    const o = ol(hermes);
    const model = hermes.modelId;
    const turn = (args, result, extra = {}) => [
      ...msgs,
      { role: 'assistant', content: '', tool_calls: [{ function: { name: 'get_weather', arguments: args }, ...extra.call }] },
      { role: 'tool', tool_name: 'get_weather', content: result, ...extra.tool },
    ];
    const ask = (messages) => o.chat({ model, messages, tools: [weather], stream: false, options: { num_predict: 4, seed: 4 } });
    const first = await ask(msgs);
    const second = await ask(turn({ city: 'Paris', days: 3 }, '{"temp_c": 21}'));
    assert.ok(second.prompt_eval_count > first.prompt_eval_count + 20, `${second.prompt_eval_count} vs ${first.prompt_eval_count}`);
    assert.equal(second.message.role, 'assistant');
    // The call's arguments (an object) and the result's content are in the prompt.
    const longArgs = await ask(turn({ city: 'Paris', days: 3, note: 'remember to bring an umbrella and a warm coat' }, '{"temp_c": 21}'));
    assert.ok(longArgs.prompt_eval_count > second.prompt_eval_count + 5, `${longArgs.prompt_eval_count} vs ${second.prompt_eval_count}`);
    const longResult = await ask(turn({ city: 'Paris', days: 3 }, '{"temp_c": 21, "sky": "overcast with light rain in the evening"}'));
    assert.ok(longResult.prompt_eval_count > second.prompt_eval_count + 5, `${longResult.prompt_eval_count} vs ${second.prompt_eval_count}`);
    // Newer clients send the call's id (and index) and tool_call_id: the
    // same conversation for this template, which prints no ids.
    const withIds = await ask(turn({ city: 'Paris', days: 3 }, '{"temp_c": 21}', { call: { id: 'call_abcd1234' }, tool: { tool_call_id: 'call_abcd1234' } }));
    assert.equal(withIds.prompt_eval_count, second.prompt_eval_count);
    // The next turn streams as any other.
    const s = await streamed(o, { model, messages: turn({ city: 'Oslo', days: 1 }, 'cold'), tools: [weather], options: { num_predict: 4, seed: 4 } });
    assert.ok(s.last.prompt_eval_count > first.prompt_eval_count + 20);
  });

  it('mistral: calls without ids get ids its template takes', T, async () => {
    const o = ol(mistral);
    const model = mistral.modelId;
    const convo = (call) => [
      ...msgs,
      { role: 'assistant', content: '', tool_calls: [{ function: { name: 'get_weather', arguments: { city: 'Paris', days: 3 } } }, call] },
      { role: 'tool', tool_name: 'search', content: 'nothing found' },
      { role: 'tool', content: '{"temp_c": 21}' },
    ];
    const search1 = { function: { name: 'search', arguments: { q: 'paris', safe: true } } };
    const r = await o.chat({ model, messages: convo(search1), tools: [weather, search], stream: false, options: { num_predict: 2, seed: 1 } });
    assert.equal(r.done, true);
    // The template writes every call's id and every result's: with the
    // tools and the conversation, the prompt is much longer than the question.
    const q = await o.chat({ model, messages: msgs, tools: [weather, search], stream: false, options: { num_predict: 1 } });
    assert.ok(r.prompt_eval_count > q.prompt_eval_count + 40, `${r.prompt_eval_count} vs ${q.prompt_eval_count}`);
    // An id the client gives is used as it is: this template refuses it.
    await assert.rejects(o.chat({ model, messages: convo({ ...search1, id: 'call_abc' }), tools: [weather, search], stream: false, options: { num_predict: 1 } }),
      (e) => e.status_code === 400 && /length 9/.test(e.error));
  });

  it('errors come as Ollama sends them', T, async () => {
    const o = ol(hermes);
    const model = hermes.modelId;
    const bad = async (req, re, oc = o) => {
      await assert.rejects(oc.chat({ model, messages: msgs, stream: false, options: { num_predict: 1 }, ...req }),
        (e) => e.name === 'ResponseError' && e.status_code === 400 && re.test(e.error), `${JSON.stringify(req)}`);
    };
    await bad({ model: plain.modelId, tools: [weather] }, /'tools' is not supported for this model/, ol(plain));
    await bad({ tools: [{ type: 'function', function: { name: 'a b' } }] }, /tools\[0\]\.function\.name/);
    await bad({ tools: [weather, weather] }, /given twice/);
    await bad({ tools: [weather], format: 'json' }, /'format' cannot be combined with 'tools'/);
    await bad({ messages: [...msgs, { role: 'assistant', content: '', tool_calls: [{ function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] }] },
      /messages\[1\]\.tool_calls\[0\]\.function\.arguments' must be an object/);
    await bad({ messages: [{ role: 'user', content: 'x', tool_calls: [{ function: { name: 'f', arguments: {} } }] }] },
      /only allowed on assistant messages/);
    await bad({ messages: [...msgs, { role: 'function', content: 'x' }] }, /must be system, user, assistant or tool/);
    await assert.rejects(o.generate({ model, prompt: 'x', stream: false, tools: [weather] }),
      (e) => e.status_code === 400 && /not supported by \/api\/generate/.test(e.error));
  });
});
