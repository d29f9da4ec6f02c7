// llamacpp-tokenize.mjs - how llama.cpp (the prebuilt release bundled in
// node-llama-cpp) tokenizes texts with a vocabulary, as JSON on stdout.
//
//   node llamacpp-tokenize.mjs VOCAB.gguf < texts.json
//
// stdin: a JSON array of strings. Output: {"tokens": [[id, ...], ...]}, one
// list per text, without special tokens added or parsed (llama_tokenize
// with add_special and parse_special false). The file is loaded for its
// vocabulary only, so a vocabulary-only GGUF works.
//
// Nothing is built or downloaded at run time (build "never", skipDownload).
import { readFileSync } from 'node:fs';
import { getLlama } from "node-llama-cpp";
import { llamaOptions } from "./peer.mjs";

const args = process.argv.slice(2);
if (args.length !== 1) {
  process.stderr.write("usage: node llamacpp-tokenize.mjs VOCAB.gguf < texts.json\n");
  process.exit(2);
}
const texts = JSON.parse(readFileSync(0, "utf8"));
if (!Array.isArray(texts) || texts.length > 10000 || texts.some((t) => typeof t !== "string")) {
  process.stderr.write("llamacpp-tokenize: stdin must be a JSON array of at most 10000 strings\n");
  process.exit(2);
}
const llama = await getLlama(llamaOptions);
const model = await llama.loadModel({ modelPath: args[0], gpuLayers: 0, vocabOnly: true });
const tokens = texts.map((t) => Array.from(model.tokenize(t, false)));
process.stdout.write(JSON.stringify({ tokens }) + "\n");
await model.dispose();
process.exit(0);
