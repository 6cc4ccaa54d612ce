// Encodes and decodes texts with Hugging Face's own `tokenizers` (the Rust library, as the
// @anush008/tokenizers Node addon): the oracle of hf_compare.
//
//   node hf_reference.js NODE_MODULES tokenizer.json texts.tsv ids.bin decoded.txt
//
// texts.tsv: one text a line, "corpus<TAB>hex of the UTF-8 bytes" (invalid UTF-8 allowed: it is
// decoded as Node and Rust's from_utf8_lossy do, with U+FFFD). ids.bin: per text, a uint32
// (little-endian) count then the ids of encode(text, null, {addSpecialTokens: false}).
// decoded.txt: per text, the hex of decode(ids, false) (special tokens kept).
// Prints the seconds spent encoding (one thread: run with RAYON_NUM_THREADS=1).
'use strict';
const fs = require('fs');
const path = require('path');

async function main() {
  const [modules, tokenizerPath, textsPath, idsPath, decodedPath] = process.argv.slice(2);
  const { Tokenizer } = require(path.join(modules, '@anush008', 'tokenizers'));
  const tokenizer = Tokenizer.fromFile(tokenizerPath);
  const texts = fs.readFileSync(textsPath, 'utf8').split('\n').filter((l) => l.length > 0)
      .map((l) => Buffer.from(l.slice(l.indexOf('\t') + 1), 'hex').toString('utf8'));
  const chunks = [];
  const decoded = [];
  let encodeSeconds = 0;
  const batch = 512;
  for (let i = 0; i < texts.length; i += batch) {
    const slice = texts.slice(i, i + batch);
    const start = process.hrtime.bigint();
    const encodings = await tokenizer.encodeBatch(slice, { addSpecialTokens: false });
    encodeSeconds += Number(process.hrtime.bigint() - start) / 1e9;
    const ids = encodings.map((e) => e.getIds());
    for (const list of ids) {
      const buffer = Buffer.alloc(4 * (list.length + 1));
      buffer.writeUInt32LE(list.length, 0);
      list.forEach((id, k) => buffer.writeUInt32LE(id, 4 * (k + 1)));
      chunks.push(buffer);
    }
    const strings = await tokenizer.decodeBatch(ids, false);
    for (const s of strings) decoded.push(Buffer.from(s, 'utf8').toString('hex'));
  }
  fs.writeFileSync(idsPath, Buffer.concat(chunks));
  fs.writeFileSync(decodedPath, decoded.join('\n') + '\n');
  const tokens = chunks.reduce((n, b) => n + b.length / 4 - 1, 0);
  console.log(`reference: ${texts.length} texts, ${tokens} tokens in ${encodeSeconds.toFixed(2)} s: ` +
              `${(tokens / encodeSeconds / 1e6).toFixed(2)} M tokens/s`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
