// llamacpp-bench.mjs - llama.cpp's side of bench/vs-llamacpp: prompt
// processing (pp) and generation (tg) throughput of the prebuilt llama.cpp
// bundled in node-llama-cpp, measured like `power bench` measures Power.
//
//   node bench/llamacpp-bench.mjs MODEL.gguf [--threads 2] [-p 512] [-n 128]
//        [-r 5] [--seed 1] [--depth 0] [--batch B] [--kv-type-k T] [--kv-type-v T]
//
// Prints one JSON object on stdout with the same field names as
// `power bench -o json` (pp_tok_s, tg_tok_s, pp_reps, tg_reps, ...).
//
// What is timed. node-llama-cpp runs llama_decode followed by
// llama_synchronize on a worker thread; llama.cpp's own performance counters
// (llama_perf_context: "prompt eval time" for multi-token decodes, "eval
// time" for single-token ones) cover exactly that span, so the headline
// figures (pp_tok_s, tg_tok_s) come from those counters: pure decode time,
// no sampling, no JavaScript. The wall-clock figures around each call
// (pp_wall_tok_s, tg_wall_tok_s) add the JavaScript round trip and the
// greedy sampling of the next token, for reference.
//
// --depth D: D random tokens are evaluated once (untimed) and every pp and
//     tg repetition starts from them: the sequence is cut back to D tokens
//     before each, as `power bench --depth` does.
// pp: p seeded random token ids (after the depth tokens), in batches of up
//     to 512 (n_batch = n_ubatch, as Power's 512-token chunks), output for
//     the last token only.
// tg: after a one-token prompt, n single-token decodes with the greedy
//     (argmax) token fed back.
// batch_tg (--batch B): B sequences of a second context (sequences: B,
//     n_batch = n_ubatch = B) decoding together, as `power bench --batch`
//     does: each sequence gets a one-token prompt (seeded random ids, the B
//     of them in one decode, untimed), then n steps in which every sequence
//     evaluates its greedy token concurrently. node-llama-cpp queues the B
//     evaluations and, once every sequence of the context has one queued,
//     dispatches them as one batch: one llama_decode of B tokens (one per
//     sequence) per step. That is checked, not assumed: the context's
//     decode calls are counted (n per repetition, each initialised for B
//     tokens) and llama.cpp's counters must show n x B tokens of batched
//     evaluation and no single-token runs. A decode of more than one token
//     lands in llama.cpp's "prompt eval" counter, so batch_tg_tok_s is
//     n x B over that time (aggregate tokens/s; per sequence: divide by B).
//     Always at depth 0 (as Power's), whatever --depth says.
// Everything runs on the CPU with node-llama-cpp's context defaults (F16 KV
// cache, flash attention "auto"); --kv-type-k/-v F16|Q8_0|Q4_0 set the KV
// cache types (flash attention then on: llama.cpp needs it for a quantized
// V). Nothing is built or downloaded: a missing prebuilt binary is an
// error.
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const peerDir = process.env.POWER_PEER_DIR || join(here, "..", "tests", "peer");
const entry = join(peerDir, "node_modules", "node-llama-cpp", "dist", "index.js");

function die(msg, code = 1) {
  process.stderr.write(`llamacpp-bench: ${msg}\n`);
  process.exit(code);
}

const usage =
  "usage: node bench/llamacpp-bench.mjs MODEL.gguf [--threads N] [-p N] [-n N] [-r N] [--seed S] [--depth D] [--batch B] [--kv-type-k T] [--kv-type-v T]";
const opt = { threads: 2, p: 512, n: 128, r: 5, seed: 1, depth: 0, batch: 0, kvK: null, kvV: null };
const kvTypes = new Set(["F16", "Q8_0", "Q4_0"]);
let modelPath = null;
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const a = argv[i];
  const key = { "--threads": "threads", "-t": "threads", "-p": "p", "-n": "n", "-r": "r", "--seed": "seed", "--depth": "depth", "-d": "depth", "--batch": "batch", "-b": "batch" }[a];
  if (a === "--kv-type-k" || a === "--kv-type-v") {
    const t = String(argv[++i]).toUpperCase();
    if (!kvTypes.has(t)) die(`invalid value for ${a}: '${argv[i]}' (F16, Q8_0, Q4_0)`, 2);
    opt[a === "--kv-type-k" ? "kvK" : "kvV"] = t;
    continue;
  }
  if (a === "-h" || a === "--help") {
    process.stdout.write(usage + "\n");
    process.exit(0);
  } else if (key) {
    const v = Number(argv[++i]);
    if (!Number.isInteger(v) || v < 0) die(`invalid value for ${a}: '${argv[i]}'\n${usage}`, 2);
    opt[key] = v;
  } else if (a.startsWith("-")) die(`unknown option '${a}'\n${usage}`, 2);
  else if (modelPath) die(`one model at a time\n${usage}`, 2);
  else modelPath = a;
}
if (!modelPath) die(usage, 2);
if (opt.threads < 1 || opt.r < 1 || (opt.p === 0 && opt.n === 0)) die(`nothing to measure\n${usage}`, 2);
if (opt.batch > 4096) die(`--batch ${opt.batch}: at most 4096 sequences (as power bench)`, 2);
if (opt.batch > 0 && opt.n === 0) die("--batch needs generated tokens (-n > 0)", 2);
if (!existsSync(entry)) die(`node-llama-cpp is not installed: run npm ci --prefix ${peerDir}`);

const { getLlama } = await import(pathToFileURL(entry).href);

// llama.cpp's log lines: kept to read the performance counters and the CPU
// backend variant it picked.
const logs = [];
const llama = await getLlama({
  gpu: false,
  build: "never",
  skipDownload: true,
  usePrebuiltBinaries: true,
  progressLogs: false,
  maxThreads: 0, // threads below are then taken as given, not as a hint
  logLevel: "log", // "log" is below "info": it carries the CPU backend line
  logger: (level, message) => logs.push(String(message)),
});
const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
const batchSize = Math.min(Math.max(opt.p, opt.depth, 1), 512);
const contextSize = Math.max(256, Math.ceil((opt.depth + Math.max(opt.p, opt.n + 1) + 1) / 256) * 256);
const kvOpts = {};
if (opt.kvK) kvOpts.experimentalKvCacheKeyType = opt.kvK;
if (opt.kvV) kvOpts.experimentalKvCacheValueType = opt.kvV;
if (opt.kvK || opt.kvV) kvOpts.flashAttention = true;
const context = await model.createContext({
  contextSize,
  batchSize,
  threads: { ideal: opt.threads, min: opt.threads },
  performanceTracking: true,
  ...kvOpts,
});
const seq = context.getSequence();

// batch_tg's context: B sequences of n + 1 positions each (node-llama-cpp
// sizes the context per sequence and rounds it up), one ubatch of B tokens.
let bctx = null;
let bseqs = [];
const bcalls = { decodes: 0, sizes: [] };
if (opt.batch > 0) {
  bctx = await model.createContext({
    contextSize: Math.max(256, Math.ceil((opt.n + 2) / 256) * 256),
    sequences: opt.batch,
    batchSize: opt.batch,
    threads: { ideal: opt.threads, min: opt.threads },
    performanceTracking: true,
    ...kvOpts,
  });
  for (let s = 0; s < opt.batch; s++) bseqs.push(bctx.getSequence());
  // Count the decode calls and the token count each batch was set up for
  // (node-llama-cpp's internal binding: initBatch(n) then decodeBatch()).
  const native = bctx._ctx;
  if (!native || typeof native.decodeBatch !== "function" || typeof native.initBatch !== "function")
    die("cannot count llama.cpp's decode calls: node-llama-cpp's context binding has changed");
  const decodeBatch = native.decodeBatch.bind(native);
  const initBatch = native.initBatch.bind(native);
  // the methods are read-only on the binding's prototype: own properties
  // of this one object shadow them
  const wrap = (name, fn) => Object.defineProperty(native, name, { value: fn, configurable: true, writable: true });
  wrap("initBatch", (size, ...rest) => {
    bcalls.sizes.push(size);
    return initBatch(size, ...rest);
  });
  wrap("decodeBatch", (...rest) => {
    bcalls.decodes++;
    return decodeBatch(...rest);
  });
}

// xorshift32, seeded: reproducible token ids without Math.random.
let rngState = (opt.seed >>> 0) || 1;
function rand() {
  rngState ^= rngState << 13;
  rngState >>>= 0;
  rngState ^= rngState >>> 17;
  rngState ^= rngState << 5;
  rngState >>>= 0;
  return rngState;
}

// Reads and resets llama.cpp's counters of a context (the single-sequence
// one unless given): {pp: [ms, tokens], tg: [ms, runs]}.
async function counters(ctx = context) {
  const start = logs.length;
  await ctx.printTimings();
  const text = logs.slice(start).join("");
  const pm = /prompt eval time =\s*([0-9.]+) ms \/\s*(\d+) tokens/.exec(text);
  const em = /\beval time =\s*([0-9.]+) ms \/\s*(\d+) runs/.exec(text.replace(/prompt eval time/g, ""));
  if (!pm || !em) die("could not read llama.cpp's performance counters from its log");
  return { pp: [Number(pm[1]), Number(pm[2])], tg: [Number(em[1]), Number(em[2])] };
}

// The vocabulary size, from one distribution (also a warm-up of sampling).
await seq.clearHistory();
const probe = await seq.controlledEvaluate([[0, { generateNext: { probabilities: true } }]]);
const nVocab = probe[0]?.next?.probabilities?.size;
if (!nVocab) die("no distribution from llama.cpp");

// The depth tokens, once; each repetition cuts the sequence back to them.
let depthFilled = false;
async function toDepth() {
  if (!depthFilled) {
    await seq.clearHistory();
    if (opt.depth > 0) {
      const toks = [];
      for (let i = 0; i < opt.depth; i++) toks.push(rand() % nVocab);
      await seq.controlledEvaluate(toks);
    }
    depthFilled = true;
  } else if (seq.nextTokenIndex > opt.depth) {
    await seq.eraseContextTokenRanges([{ start: opt.depth, end: seq.nextTokenIndex }]);
  }
  if (seq.nextTokenIndex !== opt.depth) die(`sequence at ${seq.nextTokenIndex} tokens, not the depth ${opt.depth}`);
}

async function runPp(p) {
  await toDepth();
  const toks = [];
  for (let i = 0; i < p; i++) toks.push(rand() % nVocab);
  toks[p - 1] = [toks[p - 1], { generateNext: { token: true } }];
  await counters();
  const t0 = process.hrtime.bigint();
  await seq.controlledEvaluate(toks);
  const wall = Number(process.hrtime.bigint() - t0) / 1e9;
  const c = await counters();
  if (c.pp[1] !== p) die(`expected ${p} prompt tokens in the counters, got ${c.pp[1]}`);
  return { tok_s: p / (c.pp[0] / 1e3), wall_tok_s: p / wall };
}

async function runTg(n) {
  await toDepth();
  const first = await seq.controlledEvaluate([[rand() % nVocab, { generateNext: { token: true } }]]);
  let tok = first[0].next.token;
  await counters();
  let wall = 0;
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint();
    const res = await seq.controlledEvaluate([[tok, { generateNext: { token: true } }]]);
    wall += Number(process.hrtime.bigint() - t0) / 1e9;
    tok = res[0].next.token;
  }
  const c = await counters();
  if (c.tg[1] !== n) die(`expected ${n} single-token decodes in the counters, got ${c.tg[1]}`);
  return { tok_s: n / (c.tg[0] / 1e3), wall_tok_s: n / wall };
}

// B sequences, a one-token prompt each, then n steps of one token per
// sequence, all B evaluated together.
async function runBatchTg(n) {
  const B = opt.batch;
  await Promise.all(bseqs.map((s) => s.clearHistory()));
  const first = [];
  for (let s = 0; s < B; s++) first.push(rand() % nVocab);
  const step = (toks) => Promise.all(bseqs.map((s, i) => s.controlledEvaluate([[toks[i], { generateNext: { token: true } }]])));
  let res = await step(first);
  await counters(bctx);
  bcalls.decodes = 0;
  bcalls.sizes.length = 0;
  let wall = 0;
  for (let i = 0; i < n; i++) {
    const toks = res.map((r) => r[0].next.token);
    const t0 = process.hrtime.bigint();
    res = await step(toks);
    wall += Number(process.hrtime.bigint() - t0) / 1e9;
  }
  const c = await counters(bctx);
  if (bcalls.decodes !== n || bcalls.sizes.length !== n || bcalls.sizes.some((x) => x !== B))
    die(`batch: expected ${n} decodes of ${B} tokens, got ${bcalls.decodes} decodes of [${bcalls.sizes.join(",")}] tokens`);
  // one token per step would be a single-token run, not a batched one;
  // llama.cpp prints a count of 0 runs as 1 (at 0.00 ms)
  const batched = B > 1 ? c.pp : c.tg;
  const singles = c.tg[0] > 0 ? c.tg[1] : 0;
  if (batched[1] !== (B > 1 ? n * B : n) || (B > 1 && singles !== 0))
    die(`batch: llama.cpp's counters show ${c.pp[1]} batched tokens and ${singles} single-token runs, expected ${n * B} tokens in ${n} decodes`);
  return { tok_s: (n * B) / (batched[0] / 1e3), wall_tok_s: (n * B) / wall, step_ms: batched[0] / n };
}

function stats(v) {
  const s = [...v].sort((a, b) => a - b);
  const m = s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
  return { med: m, min: s[0], max: s[s.length - 1] };
}

// Warm-up, not counted.
if (opt.p > 0) await runPp(opt.p);
if (opt.n > 0) await runTg(Math.min(opt.n, 16));
if (opt.batch > 0) await runBatchTg(Math.min(opt.n, 16));

const pp = [], ppWall = [], tg = [], tgWall = [], btg = [], btgWall = [];
for (let k = 0; k < opt.r; k++) {
  if (opt.p > 0) {
    const x = await runPp(opt.p);
    pp.push(x.tok_s);
    ppWall.push(x.wall_tok_s);
  }
  if (opt.n > 0) {
    const x = await runTg(opt.n);
    tg.push(x.tok_s);
    tgWall.push(x.wall_tok_s);
  }
  if (opt.batch > 0) {
    const x = await runBatchTg(opt.n);
    btg.push(x.tok_s);
    btgWall.push(x.wall_tok_s);
  }
}

const allLogs = logs.join("");
const backend = /loaded CPU backend from \S*?libggml-cpu-([\w-]+)\.so/.exec(allLogs);
// llama.cpp repacks some weight types into interleaved layouts for its
// matrix kernels at load time; the size tells how much of the model it did.
const repack = /CPU_REPACK model buffer size =\s*([0-9.]+) MiB/.exec(allLogs);
const out = {
  engine: "llama.cpp",
  package: "node-llama-cpp",
  cpu_backend: backend ? backend[1] : "unknown",
  cpu_features: llama.systemInfo,
  // "auto" logs what it resolved to; asked for explicitly (a quantized KV
  // type, or F16 named with --kv-type-k/-v) it logs nothing
  flash_attention: kvOpts.flashAttention === true || /Flash Attention enabled/.test(allLogs),
  repacked_mib: repack ? Number(repack[1]) : 0,
  model: modelPath.split("/").pop(),
  path: modelPath,
  n_vocab: nVocab,
  threads: opt.threads,
  p: opt.p,
  n: opt.n,
  r: opt.r,
  seed: opt.seed,
  depth: opt.depth,
  kv_type_k: (opt.kvK || "F16").toLowerCase(),
  kv_type_v: (opt.kvV || "F16").toLowerCase(),
};
if (pp.length) {
  const s = stats(pp);
  Object.assign(out, { pp_tok_s: s.med, pp_min: s.min, pp_max: s.max, pp_reps: pp });
  out.pp_wall_tok_s = stats(ppWall).med;
  out.pp_wall_reps = ppWall;
}
if (tg.length) {
  const s = stats(tg);
  Object.assign(out, { tg_tok_s: s.med, tg_min: s.min, tg_max: s.max, tg_reps: tg });
  out.tg_wall_tok_s = stats(tgWall).med;
  out.tg_wall_reps = tgWall;
}
if (btg.length) {
  const s = stats(btg);
  Object.assign(out, { batch: opt.batch, batch_tg_tok_s: s.med, batch_tg_min: s.min, batch_tg_max: s.max, batch_tg_reps: btg });
  out.batch_tg_wall_tok_s = stats(btgWall).med;
  out.batch_tg_wall_reps = btgWall;
  // as power bench's: the aggregate batched rate over the single-sequence one
  out.batch_tg_ratio = tg.length && out.tg_tok_s > 0 ? s.med / out.tg_tok_s : 0;
  out.batch_decodes_per_step = 1; // checked in runBatchTg
}
process.stdout.write(JSON.stringify(out) + "\n");
if (bctx) await bctx.dispose();
await context.dispose();
await model.dispose();
await llama.dispose();
