// peer.mjs - llama.cpp's evaluations (the prebuilt release bundled in
// node-llama-cpp, CPU only) that the tests compare Power against, as
// functions of one loaded llama.cpp: the command-line scripts
// (llamacpp-logits.mjs, llamacpp-embed.mjs) run one each, and
// llamacpp-serve.mjs runs many in one process (loading llama.cpp's
// backend once instead of once per model checked).
//
// Each function takes the script's arguments (strings) and returns the
// object the script prints; bad arguments throw a UsageError.
//
// Nothing is built or downloaded at run time: build "never" and
// skipDownload make a missing prebuilt binary an error instead.

export class UsageError extends Error {}

export const llamaOptions = {
  gpu: false,
  build: "never",
  skipDownload: true,
  usePrebuiltBinaries: true,
  progressLogs: false,
  logLevel: "error",
};

const TOPN = 10;
const kvTypes = new Set(["F16", "Q8_0", "Q4_0"]);

function topOf(probs) {
  // The map is sorted by probability, highest first.
  const out = [];
  for (const [id, p] of probs) {
    if (out.length === TOPN) break;
    out.push([id, p > 0 ? Math.log(p) : -Infinity]);
  }
  return out;
}

// MODEL.gguf 1,2,3 [--all] [--last N] [--threads N] [--kv-type-k T] [--kv-type-v T]
//
// The tokens are evaluated in batches of up to 512 (flash attention as
// node-llama-cpp's default, F16 KV cache). Returns
//   {"n_vocab": V, "tokens": [...], "top": [[id, logprob], ...10]}
// with "positions": [[[id, logprob], ...], ...] (one list per input token)
// when --all is given (--last N: only the last N positions, for long
// inputs). --kv-type-k/-v T (F16, Q8_0, Q4_0): llama.cpp's KV cache types,
// with flash attention on (llama.cpp needs it for a quantized V).
// node-llama-cpp exposes the next-token distribution as probabilities, not
// raw logits, so values are log-softmax: raw logits minus their
// log-sum-exp. Compare them against log-softmax, never raw logits.
export async function logits(llama, args) {
  let all = false;
  let last = 0;
  let threads = 2;
  let kvK = null;
  let kvV = null;
  const pos = [];
  for (let i = 0; i < args.length; i++) {
    if (args[i] === "--all") all = true;
    else if (args[i] === "--last") last = Number(args[++i]);
    else if (args[i] === "--kv-type-k") kvK = String(args[++i]).toUpperCase();
    else if (args[i] === "--kv-type-v") kvV = String(args[++i]).toUpperCase();
    else if (args[i] === "--threads") threads = Number(args[++i]);
    else pos.push(args[i]);
  }
  if (pos.length !== 2) throw new UsageError("need a model path and a token list");
  const [modelPath, idsArg] = pos;
  const tokens = idsArg.split(/[ ,]+/).filter((s) => s.length).map(Number);
  if (!tokens.length || tokens.some((t) => !Number.isInteger(t) || t < 0)) throw new UsageError(`bad token ids: ${idsArg}`);
  if (!Number.isInteger(threads) || threads < 1) throw new UsageError("bad --threads");
  if (!Number.isInteger(last) || last < 0) throw new UsageError("bad --last");
  if ((kvK && !kvTypes.has(kvK)) || (kvV && !kvTypes.has(kvV))) throw new UsageError("bad KV cache type (F16, Q8_0, Q4_0)");
  // positions whose distribution is reported
  const want = (i) => all || (last > 0 ? i >= tokens.length - last : i === tokens.length - 1);

  const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
  try {
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
    try {
      const seq = context.getSequence();
      const input = tokens.map((t, i) => (want(i) ? [t, { generateNext: { probabilities: true } }] : t));
      const res = await seq.controlledEvaluate(input);
      const positions = [];
      let nVocab = 0;
      for (let i = 0; i < tokens.length; i++) {
        const r = res[i];
        if (!want(i)) continue;
        if (!r || !r.next || !r.next.probabilities) throw new Error(`no distribution for position ${i}`);
        // With the default greedy chain every vocabulary entry is a candidate.
        nVocab = r.next.probabilities.size;
        positions.push(topOf(r.next.probabilities));
      }
      const out = { n_vocab: nVocab, tokens, top: positions[positions.length - 1] };
      if (all || last > 0) out.positions = positions;
      return out;
    } finally {
      await context.dispose();
    }
  } finally {
    await model.dispose();
  }
}

// MODEL.gguf "101,7592,102;101,2088,102" [--threads N]
//
// Each sequence is evaluated alone in an embedding context (the model's
// own pooling). Returns {"n": N, "vectors": [[...], ...]}: the pooled
// vector of each sequence as llama.cpp returns it, not normalised; for a
// reranker (rank pooling) the classification head's raw scores.
// node-llama-cpp adds the vocabulary's begin/end tokens when a sequence
// lacks them, so pass sequences that already start and end with them.
export async function embed(llama, args) {
  let threads = 2;
  const pos = [];
  for (let i = 0; i < args.length; i++) {
    if (args[i] === "--threads") threads = Number(args[++i]);
    else pos.push(args[i]);
  }
  if (pos.length !== 2) throw new UsageError("need a model path and token lists");
  if (!Number.isInteger(threads) || threads < 1) throw new UsageError("bad --threads");
  const [modelPath, seqArg] = pos;
  const seqs = seqArg.split(";").map((s) => s.split(/[ ,]+/).filter((x) => x.length).map(Number));
  if (!seqs.length || seqs.length > 64) throw new UsageError("1 to 64 sequences");
  for (const s of seqs)
    if (!s.length || s.length > 4096 || s.some((t) => !Number.isInteger(t) || t < 0))
      throw new UsageError(`bad token ids: ${seqArg}`);

  const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
  try {
    const longest = Math.max(...seqs.map((s) => s.length));
    const ctx = await model.createEmbeddingContext({
      contextSize: Math.max(64, longest + 8),
      batchSize: Math.max(64, longest + 8),
      threads,
    });
    try {
      const vectors = [];
      for (const s of seqs) {
        const e = await ctx.getEmbeddingFor(s.slice());
        vectors.push(Array.from(e.vector));
      }
      return { n: vectors.length, vectors };
    } finally {
      await ctx.dispose();
    }
  } finally {
    await model.dispose();
  }
}
