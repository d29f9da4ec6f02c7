// Ollama's think on /api/chat and /api/generate through the official
// ollama client, with syn-qwen2 (random weights) under Qwen3's template
// (<think> reasoning gated on enable_thinking) and under templates without
// reasoning (its own; Qwen2.5's). What is checked: think reaches the
// template (false writes the empty think block: more prompt tokens than
// true, which is the template's default, as is absent); a template without
// reasoning answers think true with a 400 "... does not support thinking",
// as Ollama does, and a level (think "high") on a template without
// reasoning_effort is a 400; /api/show lists "thinking" only where the
// template reasons. Streamed and whole answers agree on thinking and
// content. The split of a fixed reasoning text into message.thinking runs
// in tests/unit/test_server_e2e.c (test_ollama_think).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { Ollama } from 'ollama';

import { msgs, startToolServers, stopToolServers } from './tools_lib.mjs';

const T = { timeout: 60000 };

/** The status of a refused request (the client throws ResponseError). */
async function refused(p, needle) {
  await assert.rejects(p, (err) => {
    assert.equal(err.status_code, 400, String(err));
    if (needle) assert.match(err.error ?? err.message, needle);
    return true;
  });
}

describe('think with the ollama client', () => {
  let qwen3, plain, hermes;
  const ol = (s) => new Ollama({ host: s.url });

  before(async () => {
    ({ qwen3, plain, hermes } = await startToolServers(['qwen3', 'plain', 'hermes']));
  });

  after(() => stopToolServers([qwen3, plain, hermes]));

  it('think reaches the template as enable_thinking', T, async () => {
    const o = ol(qwen3);
    const model = qwen3.modelId;
    const ask = (extra) => o.chat({ model, messages: msgs, stream: false, options: { num_predict: 1 }, ...extra });
    const off = await ask({ think: false });
    const on = await ask({ think: true });
    const absent = await ask({});
    // "<think>\n\n</think>\n\n" after the generation prompt
    assert.ok(off.prompt_eval_count >= on.prompt_eval_count + 3, `${off.prompt_eval_count} vs ${on.prompt_eval_count}`);
    assert.equal(absent.prompt_eval_count, on.prompt_eval_count);
    assert.equal(off.message.thinking, undefined);
    const gen = await o.generate({ model, prompt: msgs[0].content, stream: false, think: false, options: { num_predict: 1 } });
    const genOn = await o.generate({ model, prompt: msgs[0].content, stream: false, think: true, options: { num_predict: 1 } });
    assert.ok(gen.prompt_eval_count > genOn.prompt_eval_count, `${gen.prompt_eval_count} vs ${genOn.prompt_eval_count}`);
    assert.ok((await o.show({ model })).capabilities.includes('thinking'));
    assert.ok(!(await ol(plain).show({ model: plain.modelId })).capabilities.includes('thinking'));
  });

  it('streamed and whole answers agree on thinking and content', T, async () => {
    const o = ol(qwen3);
    for (let seed = 1; seed <= 3; seed++) {
      const req = { model: qwen3.modelId, messages: msgs, think: true, options: { seed, num_predict: 16, temperature: 1 } };
      const r = await o.chat({ ...req, stream: false });
      let thinking = '', content = '', last = null;
      for await (const ch of await o.chat({ ...req, stream: true })) {
        thinking += ch.message.thinking ?? '';
        content += ch.message.content;
        if (ch.done) last = ch;
      }
      assert.equal(thinking, r.message.thinking ?? '');
      assert.equal(content, r.message.content);
      assert.equal(last.eval_count, r.eval_count);
      assert.ok(!r.message.content.includes('<think>'), r.message.content);
    }
  });

  it('a template without reasoning refuses think true and levels', T, async () => {
    for (const s of [plain, hermes]) {
      const o = ol(s);
      const model = s.modelId;
      await refused(o.chat({ model, messages: msgs, stream: false, think: true }), /does not support thinking/);
      await refused(o.generate({ model, prompt: 'x', stream: false, think: true }), /does not support thinking/);
      await refused(o.chat({ model, messages: msgs, stream: false, think: 'high' }), /not supported|does not support/);
      const r = await o.chat({ model, messages: msgs, stream: false, think: false, options: { num_predict: 1 } });
      assert.equal(r.done, true);
    }
    // Qwen3's template reasons but takes no reasoning_effort.
    await refused(ol(qwen3).chat({ model: qwen3.modelId, messages: msgs, stream: false, think: 'high' }), /reasoning effort/);
  });
});
