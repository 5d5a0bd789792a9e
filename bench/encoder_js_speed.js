// The reference's speed, for bench/tokenizer: npm's gpt-3-encoder (Encoder.js) encoding
// each file, as tessera-tokenize does. Prints {"seconds": ..., "tokens": ...} (tokens
// include one <|endoftext|> per file, as in tessera-tokenize's count).
//   node bench/encoder_js_speed.js data/gpt2 FILE...
'use strict';
const fs = require('fs');
const path = require('path');
const { encode } = require(path.resolve(process.argv[2], 'Encoder.js'));
const texts = process.argv.slice(3).map(file => fs.readFileSync(file, 'utf-8'));
const start = process.hrtime.bigint();
let tokens = 0;
for (const text of texts) tokens += 1 + encode(text).length;
const seconds = Number(process.hrtime.bigint() - start) / 1e9;
console.log(JSON.stringify({ seconds, tokens }));
