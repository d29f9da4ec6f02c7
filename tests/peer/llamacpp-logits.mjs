// llamacpp-logits.mjs - what llama.cpp (the prebuilt release bundled in
// node-llama-cpp) predicts for a sequence of token ids, as JSON on stdout.
//
//   node llamacpp-logits.mjs MODEL.gguf 1,2,3 [--all] [--last N] [--threads N]
//                            [--kv-type-k T] [--kv-type-v T]
//
// The tokens are evaluated in batches of up to 512 on the CPU (no GPU, flash attention
// as node-llama-cpp's default, F16 KV cache). Output:
//   {"n_vocab": V, "tokens": [...], "top": [[id, logprob], ...10]}
// with "positions": [[[id, logprob], ...], ...] (one list per input token)
// when --all is given (--last N: only the last N positions, for long inputs).
// --kv-type-k/-v T (F16, Q8_0, Q4_0): llama.cpp's KV cache types, with
// flash attention on (llama.cpp needs it for a quantized V). node-llama-cpp exposes the next-token distribution as
// probabilities, not raw logits, so values are log-softmax: raw logits minus
// their log-sum-exp. Compare them against log-softmax, never raw logits.
//
// Nothing is built or downloaded at run time: build "never" and skipDownload
// make a missing prebuilt binary an error instead.
import { getLlama } from "node-llama-cpp";

function usage(msg) {
  if (msg) process.stderr.write(`llamacpp-logits: ${msg}\n`);
  process.stderr.write("usage: node llamacpp-logits.mjs MODEL.gguf 1,2,3 [--all] [--threads N]\n");
  process.exit(2);
}

const args = process.argv.slice(2);
let all = false;
let last = 0;
let threads = 2;
let kvK = null;
let kvV = null;
const kvTypes = new Set(["F16", "Q8_0", "Q4_0"]);
const pos = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--all") all = true;
  else if (args[i] === "--last") last = Number(args[++i]);
  else if (args[i] === "--kv-type-k") kvK = String(args[++i]).toUpperCase();
  else if (args[i] === "--kv-type-v") kvV = String(args[++i]).toUpperCase();
  else if (args[i] === "--threads") threads = Number(args[++i]);
  else pos.push(args[i]);
}
if (pos.length !== 2) usage("need a model path and a token list");
const [modelPath, idsArg] = pos;
const tokens = idsArg.split(/[ ,]+/).filter((s) => s.length).map(Number);
if (!tokens.length || tokens.some((t) => !Number.isInteger(t) || t < 0)) usage(`bad token ids: ${idsArg}`);
if (!Number.isInteger(threads) || threads < 1) usage("bad --threads");
if (!Number.isInteger(last) || last < 0) usage("bad --last");
if ((kvK && !kvTypes.has(kvK)) || (kvV && !kvTypes.has(kvV))) usage("bad KV cache type (F16, Q8_0, Q4_0)");
// positions whose distribution is reported
const want = (i) => all || (last > 0 ? i >= tokens.length - last : i === tokens.length - 1);

const TOPN = 10;

function topOf(probs) {
  // The map is sorted by probability, highest first.
  const out = [];
  for (const [id, p] of probs) {
    if (out.length === TOPN) break;
    out.push([id, p > 0 ? Math.log(p) : -Infinity]);
  }
  return out;
}

const llama = await getLlama({
  gpu: false,
  build: "never",
  skipDownload: true,
  usePrebuiltBinaries: true,
  progressLogs: false,
  logLevel: "error",
});
const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
const ctxSize = Math.max(256, Math.ceil((tokens.length + 1) / 256) * 256);
const kvOpts = {};
if (kvK) kvOpts.experimentalKvCacheKeyType = kvK;
if (kvV) kvOpts.experimentalKvCacheValueType = kvV;
if (kvK || kvV) kvOpts.flashAttention = true;
const context = await model.createContext({
  contextSize: ctxSize,
  batchSize: Math.min(Math.max(tokens.length, 1), 512),
  threads,
  ...kvOpts,
});
const seq = context.getSequence();
const input = tokens.map((t, i) => (want(i) ? [t, { generateNext: { probabilities: true } }] : t));
const res = await seq.controlledEvaluate(input);
const positions = [];
let nVocab = 0;
for (let i = 0; i < tokens.length; i++) {
  const r = res[i];
  if (want(i)) {
    if (!r || !r.next || !r.next.probabilities) {
      process.stderr.write(`llamacpp-logits: no distribution for position ${i}\n`);
      process.exit(1);
    }
    // With the default greedy chain every vocabulary entry is a candidate.
    nVocab = r.next.probabilities.size;
    positions.push(topOf(r.next.probabilities));
  }
}
const out = { n_vocab: nVocab, tokens, top: positions[positions.length - 1] };
if (all || last > 0) out.positions = positions;
process.stdout.write(JSON.stringify(out) + "\n");
await context.dispose();
await model.dispose();
await llama.dispose();
