// llamacpp-embed.mjs - what llama.cpp (the prebuilt release bundled in
// node-llama-cpp) computes in embedding mode for sequences of token ids, as
// JSON on stdout.
//
//   node llamacpp-embed.mjs MODEL.gguf "101,7592,102;101,2088,102" [--threads N]
//
// Output and options: embed() in peer.mjs. The tests run the same function
// through llamacpp-serve.mjs, many models in one process.
import { getLlama } from "node-llama-cpp";
import { embed, llamaOptions, UsageError } from "./peer.mjs";

try {
  const llama = await getLlama(llamaOptions);
  const out = await embed(llama, process.argv.slice(2));
  process.stdout.write(JSON.stringify(out) + "\n");
  process.exit(0);
} catch (e) {
  process.stderr.write(`llamacpp-embed: ${e && e.message ? e.message : e}\n`);
  if (e instanceof UsageError)
    process.stderr.write('usage: node llamacpp-embed.mjs MODEL.gguf "1,2,3;4,5" [--threads N]\n');
  process.exit(e instanceof UsageError ? 2 : 1);
}
