// llamacpp-embed.mjs - what llama.cpp (the prebuilt release bundled in
// node-llama-cpp) computes in embedding mode for sequences of token ids, as
// JSON on stdout.
//
//   node llamacpp-embed.mjs MODEL.gguf "101,7592,102;101,2088,102" [--threads N]
//
// Each sequence is evaluated alone in an embedding context (the model's own
// pooling; CPU). Output: {"n": N, "vectors": [[...], ...]}: the pooled vector
// of each sequence as llama.cpp returns it, not normalised; for a reranker
// (rank pooling) the classification head's raw scores. node-llama-cpp adds
// the vocabulary's begin/end tokens when a sequence lacks them, so pass
// sequences that already start and end with them.
//
// Nothing is built or downloaded at run time (build "never", skipDownload).
import { getLlama } from "node-llama-cpp";

function usage(msg) {
  if (msg) process.stderr.write(`llamacpp-embed: ${msg}\n`);
  process.stderr.write('usage: node llamacpp-embed.mjs MODEL.gguf "1,2,3;4,5" [--threads N]\n');
  process.exit(2);
}

const args = process.argv.slice(2);
let threads = 2;
const pos = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--threads") threads = Number(args[++i]);
  else pos.push(args[i]);
}
if (pos.length !== 2) usage("need a model path and token lists");
if (!Number.isInteger(threads) || threads < 1) usage("bad --threads");
const [modelPath, seqArg] = pos;
const seqs = seqArg.split(";").map((s) => s.split(/[ ,]+/).filter((x) => x.length).map(Number));
if (!seqs.length || seqs.length > 64) usage("1 to 64 sequences");
for (const s of seqs)
  if (!s.length || s.length > 4096 || s.some((t) => !Number.isInteger(t) || t < 0)) usage(`bad token ids: ${seqArg}`);

const llama = await getLlama({
  gpu: false,
  build: "never",
  skipDownload: true,
  usePrebuiltBinaries: true,
  progressLogs: false,
  logLevel: "error",
});
const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
const longest = Math.max(...seqs.map((s) => s.length));
const ctx = await model.createEmbeddingContext({
  contextSize: Math.max(64, longest + 8),
  batchSize: Math.max(64, longest + 8),
  threads,
});
const vectors = [];
for (const s of seqs) {
  const e = await ctx.getEmbeddingFor(s.slice());
  vectors.push(Array.from(e.vector));
}
process.stdout.write(JSON.stringify({ n: vectors.length, vectors }) + "\n");
await ctx.dispose();
await model.dispose();
process.exit(0);
