// Concurrent streams are independent: 8 greedy streams run at once give
// exactly the text each gives alone (the batch never leaks between
// sequences, and the forward pass is batch-invariant).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { client, drain, metrics, startServer, waitIdle, withTimeout } from './lib.mjs';

const prompts = [
  'def main(',
  'import os\nimport sys\n',
  'class Foo:\n    def ',
  'for i in range(',
  '    return self.',
  "if __name__ == '__main__':\n",
  '# Copyright 2001 Python Software Foundation\n',
  'def _parse(self, s):\n    """',
];

describe('8 simultaneous greedy streams', () => {
  let srv;
  let oc;
  before(async () => {
    srv = await startServer({ model: 'codelm-py-Q8_0.gguf', args: ['--parallel', '8'] });
    oc = client(srv);
  });
  after(async () => {
    const r = await srv?.stop();
    if (r) assert.equal(r.code, 0);
  });

  const one = async (p, i) => {
    // Half completions, half chat, so both paths are batched together.
    if (i % 2 === 0) {
      const s = await oc.completions.create({ prompt: p, max_tokens: 40, temperature: 0, stream: true, stream_options: { include_usage: true } });
      return drain(s, 'completion');
    }
    const s = await oc.chat.completions.create({ messages: [{ role: 'user', content: p }], max_tokens: 40, temperature: 0, stream: true, stream_options: { include_usage: true } });
    return drain(s, 'chat');
  };

  it('give exactly the text each gives alone', { timeout: 60000 }, async () => {
    const alone = [];
    for (let i = 0; i < prompts.length; i++) alone.push(await withTimeout(one(prompts[i], i), 20000, `stream ${i} alone`));
    const m0 = await metrics(srv);
    const together = await withTimeout(Promise.all(prompts.map(one)), 30000, '8 streams at once');
    const m1 = await metrics(srv);
    // They really ran together: far fewer batched steps than tokens generated.
    const steps = m1.power_engine_steps_total - m0.power_engine_steps_total;
    const tokens = together.reduce((n, t) => n + t.usage.completion_tokens, 0);
    assert.ok(steps < tokens / 2, `${steps} engine steps for ${tokens} tokens`);
    const distinct = new Set(alone.map((a) => a.text));
    assert.ok(distinct.size >= 6, 'the prompts lead to different texts');
    for (let i = 0; i < prompts.length; i++) {
      assert.ok(alone[i].text.length > 0, `prompt ${i} generated text`);
      assert.equal(together[i].text, alone[i].text, `prompt ${i}: concurrent text differs from the text alone`);
      assert.equal(together[i].finish, alone[i].finish);
      assert.deepEqual(together[i].usage, alone[i].usage);
    }
    await waitIdle(srv, 10000);
  });
});
