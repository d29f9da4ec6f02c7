// Receipts through the official OpenAI client, checked with an independent
// RFC 8785 implementation (the canonicalize package): every chat,
// completion and embeddings answer carries a receipt whose receipt_sha256
// is the SHA-256 of its canonical JSON; the client keeps working; no raw
// prompt_cache_key or text appears in a receipt. Also cross-checks the
// canonical JSON of `power verify --canonical` against canonicalize on
// seeded random documents.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import canonicalize from 'canonicalize';
import { startServer, client as makeClient, env } from './lib.mjs';

const sha256 = (s) => createHash('sha256').update(s, 'utf8').digest('hex');

function receiptDigest(receipt) {
  const r = { ...receipt };
  delete r.signature;
  return sha256(canonicalize(r));
}

// A small seeded generator (mulberry32): the same documents every run.
function rng(seed) {
  return () => {
    seed |= 0; seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const CHARS = ['a', 'B', 'z', '\u00e9', '\u20ac', '\ud83d\ude00', '\ue000', '\uffff', '\u0001', '\n', '"', '\\', '/', ' ', '\u007f', '1'];
function randString(r) {
  let s = '';
  const n = Math.floor(r() * 6);
  for (let i = 0; i < n; i++) s += CHARS[Math.floor(r() * CHARS.length)];
  return s;
}
function randNumber(r) {
  switch (Math.floor(r() * 6)) {
    case 0: return Math.floor(r() * 2000) - 1000;
    case 1: return (r() - 0.5) * Math.pow(10, Math.floor(r() * 60) - 30);
    case 2: return r();
    case 3: return Math.pow(10, Math.floor(r() * 40) - 10);
    case 4: return -0;
    default: return Math.floor((r() - 0.5) * 2 ** 53);
  }
}
function randValue(r, depth) {
  const k = Math.floor(r() * (depth > 3 ? 4 : 7));
  if (k === 0) return randNumber(r);
  if (k === 1) return randString(r);
  if (k === 2) return [true, false, null][Math.floor(r() * 3)];
  if (k === 3) return randNumber(r);
  if (k === 4 || k === 5) {
    const o = {};
    const n = Math.floor(r() * 5);
    for (let i = 0; i < n; i++) o[randString(r)] = randValue(r, depth + 1);
    return o;
  }
  const a = [];
  const n = Math.floor(r() * 4);
  for (let i = 0; i < n; i++) a.push(randValue(r, depth + 1));
  return a;
}

test('canonical JSON agrees with canonicalize on 2000 seeded random documents', () => {
  const dir = mkdtempSync(join(tmpdir(), 'power-jcs-'));
  try {
    const r = rng(8785);
    const docs = [];
    for (let i = 0; i < 2000; i++) {
      const o = {};
      const n = 1 + Math.floor(r() * 6);
      for (let j = 0; j < n; j++) o[randString(r)] = randValue(r, 0);
      docs.push(o);
    }
    const file = join(dir, 'docs.jsonl');
    writeFileSync(file, docs.map((d) => JSON.stringify(d)).join('\n') + '\n');
    const out = execFileSync(env().bin, ['verify', '--canonical', file], { encoding: 'utf8', maxBuffer: 1 << 26 });
    const lines = out.split('\n').slice(0, -1);
    assert.equal(lines.length, docs.length);
    for (let i = 0; i < docs.length; i++) assert.equal(lines[i], canonicalize(docs[i]), `document ${i}: ${JSON.stringify(docs[i])}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('every answer carries a receipt the client ignores and canonicalize confirms', async () => {
  const srv = await startServer({ model: 'codelm-py-Q8_0.gguf' });
  try {
    const client = makeClient(srv);
    const secret = 'cache-key-never-in-receipts-7d1f';
    const chat = await client.chat.completions.create({
      model: 'codelm-py-Q8_0', messages: [{ role: 'user', content: 'def area(w, h):' }], max_tokens: 8,
      prompt_cache_key: secret,
    });
    assert.equal(chat.object, 'chat.completion');
    assert.equal(typeof chat.choices[0].message.content, 'string');
    assert.equal(chat.receipt.schema, 'power.receipt.v1');
    assert.equal(chat.receipt_sha256, receiptDigest(chat.receipt));
    assert.equal(chat.receipt.output.text_sha256, sha256(chat.choices[0].message.content));
    assert.notEqual(chat.receipt.model.template_sha256, null);
    const text = JSON.stringify(chat.receipt);
    assert.ok(!text.includes(secret), 'raw prompt_cache_key in a receipt');
    assert.ok(!text.includes('area'), 'prompt text in a receipt');
    assert.ok(chat.timings && chat.timings.total_ms >= 0, 'timings beside the receipt');

    const cmpl = await client.completions.create({ model: 'codelm-py-Q8_0', prompt: 'import ', max_tokens: 6, seed: 5, temperature: 0.7 });
    assert.equal(cmpl.receipt_sha256, receiptDigest(cmpl.receipt));
    assert.equal(cmpl.receipt.decoding.seed, '5');
    assert.equal(cmpl.receipt.decoding.seed_source, 'request');
    assert.equal(cmpl.receipt.prompt.text_sha256, sha256('import '));

    // streamed: the receipt comes on the final (usage) chunk only
    const stream = await client.chat.completions.create({
      model: 'codelm-py-Q8_0', messages: [{ role: 'user', content: 'class A:' }], max_tokens: 6, stream: true,
      stream_options: { include_usage: true },
    });
    let content = '';
    const withReceipt = [];
    let last = null;
    for await (const chunk of stream) {
      if (chunk.choices?.[0]?.delta?.content) content += chunk.choices[0].delta.content;
      if (chunk.receipt) withReceipt.push(chunk);
      last = chunk;
    }
    assert.equal(withReceipt.length, 1);
    assert.equal(withReceipt[0], last);
    assert.ok(last.usage);
    assert.equal(last.receipt_sha256, receiptDigest(last.receipt));
    assert.equal(last.receipt.output.text_sha256, sha256(content));
    assert.equal(last.receipt.decoding.seed_source, 'generated');

    const emb = await client.embeddings.create({ model: 'codelm-py-Q8_0', input: ['a', 'bc'] });
    assert.equal(emb.data.length, 2);
    assert.equal(emb.receipt_sha256, receiptDigest(emb.receipt));
    assert.equal(emb.receipt.output.vectors, 2);
  } finally {
    await srv.stop();
  }
});
