// llamacpp-logits.mjs - what llama.cpp (the prebuilt release bundled in
// node-llama-cpp) predicts for a sequence of token ids, as JSON on stdout.
//
//   node llamacpp-logits.mjs MODEL.gguf 1,2,3 [--all] [--last N] [--threads N]
//                            [--kv-type-k T] [--kv-type-v T]
//
// Output and options: logits() in peer.mjs. The tests run the same
// function through llamacpp-serve.mjs, many models in one process.
import { getLlama } from "node-llama-cpp";
import { llamaOptions, logits, UsageError } from "./peer.mjs";

try {
  const llama = await getLlama(llamaOptions);
  const out = await logits(llama, process.argv.slice(2));
  process.stdout.write(JSON.stringify(out) + "\n");
  await llama.dispose();
} catch (e) {
  process.stderr.write(`llamacpp-logits: ${e && e.message ? e.message : e}\n`);
  if (e instanceof UsageError)
    process.stderr.write("usage: node llamacpp-logits.mjs MODEL.gguf 1,2,3 [--all] [--last N] [--threads N]\n");
  process.exit(e instanceof UsageError ? 2 : 1);
}
