// llamacpp-serve.mjs - llama.cpp's evaluations (peer.mjs) for many models
// in one process: llama.cpp's backend is loaded once, then each request
// loads its model, evaluates and disposes of it.
//
//   node llamacpp-serve.mjs < requests
//
// One request per line on stdin, {"op": "logits" | "embed", "argv": [...]}
// (argv: the arguments llamacpp-logits.mjs or llamacpp-embed.mjs would
// take, as strings); one line of JSON on stdout per request, in order: the
// object the script would print, or {"error": "..."} (also written to
// stderr). Ends at the end of stdin.
import readline from "node:readline";
import { getLlama } from "node-llama-cpp";
import { embed, llamaOptions, logits, UsageError } from "./peer.mjs";

const ops = { logits, embed };

const llama = await getLlama(llamaOptions);
const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of rl) {
  if (!line.trim()) continue;
  let out;
  try {
    const req = JSON.parse(line);
    const f = req && Object.hasOwn(ops, req.op) ? ops[req.op] : null;
    if (!f) throw new UsageError(`unknown op ${JSON.stringify(req && req.op)} (logits, embed)`);
    if (!Array.isArray(req.argv) || req.argv.some((a) => typeof a !== "string"))
      throw new UsageError("argv must be an array of strings");
    out = await f(llama, req.argv);
  } catch (e) {
    const msg = e && e.message ? e.message : String(e);
    process.stderr.write(`llamacpp-serve: ${msg}\n`);
    out = { error: msg };
  }
  process.stdout.write(JSON.stringify(out) + "\n");
}
await llama.dispose();
process.exit(0);
