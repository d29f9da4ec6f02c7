// encoders.test.mjs - `power serve` with BERT-family encoders: the official
// openai client's embeddings on a served bge-small model (float and base64,
// batches, token-array input), its typed 400 when a generation is asked of
// an embedding model, and POST /v1/rerank on a cross-encoder (ordering,
// top_n, return_documents, errors naming their field).
//
// The models are written here by `power synth` (2 layers, dummy weights)
// with llama.cpp's bert-bge vocabulary, copied out of the llama.cpp source
// bundled in node-llama-cpp (tests/peer/bundle-files.sh; tests/peer's node
// modules must be installed). Their vectors match llama.cpp's
// (test_model_bert); here the HTTP surface is checked.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';

import OpenAI from 'openai';

import { client, env, post, startServer } from './lib.mjs';

const T = { timeout: 60000 };
const here = path.dirname(fileURLToPath(import.meta.url));

function synth(bin, vocab, arch, out) {
  execFileSync(bin, ['synth', '--arch', arch, '--vocab', vocab, '--out', out, '--layers', '2', '--quiet'], {
    stdio: ['ignore', 'ignore', 'inherit'],
    timeout: 120000,
  });
}

describe('encoders: embeddings and rerank', () => {
  let dir;
  let emb;
  let rr;
  let oc;
  before(async () => {
    const { bin } = env();
    // the vocabulary, cached beside the binary as the CTest fixture does
    const assets = path.join(path.dirname(bin), 'peer-assets');
    execFileSync('sh', [path.join(here, '../peer/bundle-files.sh'), assets, 'models/ggml-vocab-bert-bge.gguf'], {
      stdio: ['ignore', 'ignore', 'inherit'],
      timeout: 240000,
    });
    const vocab = path.join(assets, 'ggml-vocab-bert-bge.gguf');
    dir = mkdtempSync(path.join(tmpdir(), 'power-enc-'));
    synth(bin, vocab, 'bge-small-en-v1.5', path.join(dir, 'bge.gguf'));
    synth(bin, vocab, 'ms-marco-minilm-l6-v2', path.join(dir, 'rerank.gguf'));
    emb = await startServer({ model: path.join(dir, 'bge.gguf') });
    rr = await startServer({ model: path.join(dir, 'rerank.gguf') });
    oc = client(emb);
  }, { timeout: 300000 });
  after(async () => {
    await emb?.stop();
    await rr?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('openai client: unit vectors of 384, base64 and float agree, batches equal singles', T, async () => {
    const a = await oc.embeddings.create({ model: emb.modelId, input: 'The quick brown fox.' });
    assert.equal(a.object, 'list');
    const v = a.data[0].embedding;
    assert.equal(v.length, 384, 'n_embd of bge-small');
    const norm = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
    assert.ok(Math.abs(norm - 1) < 1e-4, `norm ${norm}`);
    assert.ok(a.usage.prompt_tokens >= 6, '[CLS] words . [SEP]');
    const f = await oc.embeddings.create({ model: emb.modelId, input: 'The quick brown fox.', encoding_format: 'float' });
    const w = f.data[0].embedding;
    for (let i = 0; i < v.length; i++) assert.ok(Math.abs(v[i] - w[i]) <= 1e-6, `dim ${i}: ${v[i]} vs ${w[i]}`);
    const three = await oc.embeddings.create({
      input: ['a bear', 'The quick brown fox.', 'something else entirely'],
      encoding_format: 'float',
    });
    assert.deepEqual(three.data.map((d) => d.index), [0, 1, 2]);
    assert.deepEqual(three.data[1].embedding, w, 'same input, same vector, whatever the batch');
    assert.notDeepEqual(three.data[0].embedding, three.data[2].embedding);
    // the same text as token ids ([CLS] ... [SEP] from /tokenize)
    const tk = await post(emb, '/tokenize', { content: 'The quick brown fox.', add_special: true });
    assert.equal(tk.status, 200, tk.text);
    const ids = tk.json.tokens;
    assert.equal(ids[0], 101);
    assert.equal(ids.at(-1), 102);
    const t = await oc.embeddings.create({ input: [ids], encoding_format: 'float' });
    assert.deepEqual(t.data[0].embedding, w);
  });

  it('an embedding model refuses generation with a typed 400 naming the model', T, async () => {
    await assert.rejects(
      oc.chat.completions.create({ model: emb.modelId, messages: [{ role: 'user', content: 'hi' }] }),
      (e) => {
        assert.ok(e instanceof OpenAI.BadRequestError, `${e.constructor.name}: ${e.message}`);
        assert.equal(e.code, 'unsupported_model');
        assert.equal(e.param, 'model');
        assert.match(e.message, /does not generate text/);
        return true;
      },
    );
    await assert.rejects(oc.completions.create({ model: emb.modelId, prompt: 'hi' }), OpenAI.BadRequestError);
    const r = await post(emb, '/v1/rerank', { query: 'q', documents: ['a'] });
    assert.equal(r.status, 400);
    assert.equal(r.json.error.code, 'model_not_reranker');
    const g = await post(emb, '/api/generate', { model: emb.modelId, prompt: 'hi', stream: false });
    assert.equal(g.status, 400, g.text);
    assert.match(g.json.error, /does not generate text/);
    const show = await post(emb, '/api/show', { model: emb.modelId });
    assert.equal(show.status, 200, show.text);
    assert.deepEqual(show.json.capabilities, ['embedding']);
  });

  it('rerank: sorted scores, top_n, return_documents, usage', T, async () => {
    const docs = ['The giant panda is a bear.', { text: 'Pandas eat bamboo.' }, 'Stock markets fell.', 'hello'];
    const all = await post(rr, '/v1/rerank', { model: rr.modelId, query: 'what do pandas eat?', documents: docs });
    assert.equal(all.status, 200, all.text);
    assert.equal(all.json.object, 'list');
    assert.equal(all.json.model, rr.modelId);
    const res = all.json.results;
    assert.equal(res.length, 4);
    assert.deepEqual([...res.map((x) => x.index)].sort(), [0, 1, 2, 3]);
    for (let i = 1; i < res.length; i++) assert.ok(res[i - 1].relevance_score >= res[i].relevance_score, 'sorted');
    assert.ok(res.every((x) => Number.isFinite(x.relevance_score) && x.document === undefined));
    assert.ok(all.json.usage.prompt_tokens > 20 && all.json.usage.total_tokens === all.json.usage.prompt_tokens);
    // the same scores alone and with top_n; documents echoed on request
    const top = await post(rr, '/rerank', { query: 'what do pandas eat?', documents: docs, top_n: 2, return_documents: true });
    assert.equal(top.status, 200, top.text);
    assert.equal(top.json.results.length, 2);
    assert.deepEqual(top.json.results.map((x) => [x.index, x.relevance_score]), res.slice(0, 2).map((x) => [x.index, x.relevance_score]));
    const text = (d) => (typeof d === 'string' ? d : d.text);
    for (const x of top.json.results) assert.deepEqual(x.document, { text: text(docs[x.index]) });
    const one = await post(rr, '/v1/rerank', { query: 'what do pandas eat?', documents: [docs[2]] });
    assert.equal(one.json.results[0].relevance_score, res.find((x) => x.index === 2).relevance_score);
  });

  it('rerank: 400s name the field; embeddings on a reranker are refused', T, async () => {
    const bad = async (body, param) => {
      const r = await post(rr, '/v1/rerank', body);
      assert.equal(r.status, 400, r.text);
      assert.equal(r.json.error.param, param, r.text);
    };
    await bad({ documents: ['a'] }, 'query');
    await bad({ query: 7, documents: ['a'] }, 'query');
    await bad({ query: 'q' }, 'documents');
    await bad({ query: 'q', documents: [] }, 'documents');
    await bad({ query: 'q', documents: ['a', 3] }, 'documents');
    await bad({ query: 'q', documents: [{ text: 'a', title: 'b' }] }, 'documents');
    await bad({ query: 'q', documents: ['a'], top_n: 0 }, 'top_n');
    await bad({ query: 'q', documents: ['a'], return_documents: 'yes' }, 'return_documents');
    await bad({ query: 'q', documents: ['a'], rank_fields: ['x'] }, 'rank_fields');
    await bad({ query: 'q', documents: ['word '.repeat(600)] }, 'documents');
    await bad({ query: 'q', documents: Array(1025).fill('a') }, 'documents');
    const m = await post(rr, '/v1/rerank', { model: 'nope', query: 'q', documents: ['a'] });
    assert.equal(m.status, 404);
    const e = await post(rr, '/v1/embeddings', { input: 'hello' });
    assert.equal(e.status, 400);
    assert.equal(e.json.error.code, 'unsupported_model');
  });
});
