// Golden token ids from Hugging Face's own JavaScript tokenizer (npm @huggingface/tokenizers)
// for tests/text/golden_test.py.
//   node golden_ids.mjs --node-modules DIR TOKENIZER_JSON CORPUS_JSONL   -> one JSON line per
//   corpus line: {"ids": [...], "decoded": "..."} (decoded without clean-up of spaces).
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const args = process.argv.slice(2);
const nm = args.indexOf("--node-modules");
if (nm < 0 || args.length !== 4) {
  console.error("usage: node golden_ids.mjs --node-modules DIR TOKENIZER_JSON CORPUS_JSONL");
  process.exit(2);
}
const modules = args[nm + 1];
const [tokenizerPath, corpusPath] = args.filter((_, i) => i !== nm && i !== nm + 1);
const require = createRequire(path.join(modules, "x.js"));
const { Tokenizer } = require("@huggingface/tokenizers");
const tokenizer = new Tokenizer(JSON.parse(readFileSync(tokenizerPath, "utf8")), {});
const lines = readFileSync(corpusPath, "utf8").split("\n").filter((l) => l.length > 0);
const out = [];
for (const line of lines) {
  const text = JSON.parse(line);
  const ids = tokenizer.encode(text).ids;
  const decoded = ids.length ? tokenizer.decode(ids, { clean_up_tokenization_spaces: false }) : "";
  out.push(JSON.stringify({ ids, decoded }));
}
process.stdout.write(out.join("\n") + "\n");
