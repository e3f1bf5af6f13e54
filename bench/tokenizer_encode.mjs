// The baseline of bench/tokenizer_bench.py: Hugging Face's JavaScript tokenizer (npm
// @huggingface/tokenizers) encoding a file REPEATS times on one thread (the fastest pass).
//   node tokenizer_encode.mjs NODE_MODULES TOKENIZER_JSON TEXT_FILE REPEATS
// prints {"bytes": N, "tokens": T, "seconds": S}
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const [modules, tokenizerPath, textPath, repeats] = process.argv.slice(2);
const require = createRequire(path.join(modules, "x.js"));
const { Tokenizer } = require("@huggingface/tokenizers");
const tokenizer = new Tokenizer(JSON.parse(readFileSync(tokenizerPath, "utf8")), {});
const text = readFileSync(textPath, "utf8");
const bytes = Buffer.byteLength(text, "utf8");
// The fastest of REPEATS passes: later passes run JIT-compiled code and a warm cache.
let tokens = 0;
let seconds = Infinity;
for (let r = 0; r < Number(repeats); ++r) {
  const start = process.hrtime.bigint();
  tokens = tokenizer.encode(text).ids.length;
  seconds = Math.min(seconds, Number(process.hrtime.bigint() - start) / 1e9);
}
console.log(JSON.stringify({ bytes, tokens, seconds }));
