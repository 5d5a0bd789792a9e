// Writes encoder_js_reference.json: texts and the tokens that npm's gpt-3-encoder (its own
// Encoder.js, the reference of tests/text/test_gpt2_encoder_js.cpp) gives for them.
//   scripts/get-gpt2-tokenizer && node tests/text/make_encoder_js_reference.js [data/gpt2]
// The cases: English, Japanese and other scripts, code, emoji, odd whitespace, tiktoken's test
// strings, long runs, and random strings from a seeded generator (the same file every run).
// Every character drawn is one that Node's tables (Unicode 16) and PCRE2 10.42's (Unicode
// 15.0) class alike, apart from U+0085 and U+FEFF, which the C++ test checks on its own
// (JavaScript's \s differs from Python's there; see docs/text.md).
'use strict';
const fs = require('fs');
const path = require('path');

const vocabDir = path.resolve(process.argv[2] || path.join(__dirname, '../../data/gpt2'));
const { encode, decode } = require(path.join(vocabDir, 'Encoder.js'));

const cases = [];
const add = (name, text) => cases.push({ name, text });

add('empty', '');
add('hello world', 'hello world');
for (let n = 1; n <= 17; ++n) add(`${n} zeros`, '0'.repeat(n));
add('tiktoken roundtrip Chinese', '请考试我的软件！12345');
add('English', 'The quick brown fox jumps over the lazy dog. It\'s 9:30 a.m., and we\'ve got 2,500 ' +
  'miles to go; they\'ll say "don\'t" -- I\'m sure you\'d agree (mostly).');
add('English contractions in capitals', "I'M SURE IT'S FINE, WE'LL SEE. Don'T 'S 'T 'RE 'VE 'M 'LL 'D");
add('apostrophes', "''s 's's ' s '' ''' 'ss 'll've 'é 'd'");
add('English paragraph', 'Tessera is a from-scratch C++20 deep learning framework in which Fully Sharded Data ' +
  'Parallel training is native: every module\'s parameters live as flat shards spread across ranks.\n\n' +
  'A tessera is one tile of a mosaic; each rank holds its tiles of every layer.\n');
add('smart quotes and dashes', '“Quoted,” she said — and left… ‘single’ – en dash');
add('Japanese', '日本語のテキストをトークンに分けます。東京は2024年に晴れでした！「こんにちは」と言った。');
add('Japanese katakana and fullwidth', 'コンピューター ｶﾀｶﾅ ＡＢＣ１２３　全角スペース');
add('Korean', '안녕하세요, 세계! 한국어 문장입니다.');
add('Chinese', '机器学习是人工智能的一个分支。');
add('Russian', 'Съешь же ещё этих мягких французских булок, да выпей чаю.');
add('Greek', 'Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.');
add('Arabic', 'مرحبا بالعالم ١٢٣ والأرقام 456');
add('Hindi', 'नमस्ते दुनिया १२३');
add('accents precomposed and combining', 'café cafe\u0301 naïve nai\u0308ve Ångström A\u030angstro\u0308m');
add('code C++', '#include <vector>\n\nint main(int argc, char** argv) {\n\tstd::vector<int> v{1, 2, 3};\n' +
  '\tfor (auto& x : v) x *= 2;  // double\n\treturn v.size() == 3 ? 0 : 1;\n}\n');
add('code Python', 'def f(x):\n    """Docstring."""\n    if x >= 10:\n        return x ** 2\n    return [i for i in range(x)]\n');
add('code JSON and shell', '{"key": [1, 2.5e-3, null, true], "s": "a\\"b"}\n$ ls -la | grep \'^d\' && echo "$HOME"\n');
add('emoji', '👍 👍🏽 ❤️ 🇯🇵🇫🇷 👨‍👩‍👧‍👦 🙂🙃😀 a👍b 1👍2');
add('odd whitespace', ' \t \n\n  x  \r\n\ty \u00a0z\u3000w\u2028v\u2029u\u2009t\u202f s\u205f\u1680r \v\f q');
add('spaces before newlines', 'a \nb  \n c   \n\n   d\n \n');
add('leading and trailing spaces', '   leading and trailing   ');
add('only spaces', '     ');
add('only newlines', '\n\n\n');
add('tabs', '\t\t\tx\t\ty\t');
add('carriage returns', 'a\r\rb\r\n\r\nc');
add('digits and letters', 'abc123def 456ghi 7a8b9c 0.5 1e10 3,141,592');
add('other digits', '٣٤٥ १२३ ⅠⅡⅢ ²³¹ ０１２');
add('math letters', '𝐀𝐁𝐂 𝑥𝑦𝑧 𝟎𝟏𝟐');
add('symbols', '© ® ™ § ¶ † ‡ • ° ± × ÷ € £ ¥ ← → ∀ ∃ ∈ ∑ √ ∞');
add('endoftext as text', 'hello <|endoftext|> world<|endoftext|>');
add('long run of a', 'a'.repeat(2000));
add('long run of spaces then a word', ' '.repeat(1000) + 'word');
add('long run of newlines', '\n'.repeat(500) + 'x');
add('long run of 0', '0'.repeat(1000));
add('long run of ^', '^'.repeat(1000));
add('long run of \'s', "'s".repeat(500));
add('long word', 'pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism');
add('mixed long', 'abc'.repeat(300) + ' ' + '123'.repeat(100) + '!?'.repeat(100));

// A seeded generator (mulberry32) drawing characters from weighted classes.
let seed = 20240520;
function random() {
  seed = (seed + 0x6D2B79F5) | 0;
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = list => list[Math.floor(random() * list.length)];
const span = (first, last) => () => String.fromCodePoint(first + Math.floor(random() * (last - first + 1)));
const oneOf = text => () => pick(Array.from(text));
const classes = [
  [30, span(0x61, 0x7a)], [6, span(0x41, 0x5a)], [6, span(0x30, 0x39)], [12, oneOf(' ')],
  [6, span(0x21, 0x7e)], [4, oneOf("'strevmld")],
  [4, oneOf('\t\n\r\v\f\u00a0\u1680\u2000\u2005\u200a\u2028\u2029\u202f\u205f\u3000')],
  [3, span(0xa1, 0xff)], [2, span(0x100, 0x17f)], [2, span(0x300, 0x36f)], [2, span(0x391, 0x3c9)],
  [2, span(0x410, 0x44f)], [1, span(0x621, 0x64a)], [1, span(0x660, 0x669)], [1, span(0x905, 0x939)],
  [1, span(0x966, 0x96f)], [3, span(0x3041, 0x3096)], [2, span(0x30a1, 0x30fa)], [4, span(0x4e00, 0x9fa5)],
  [2, span(0xac00, 0xd7a3)], [1, span(0xff01, 0xff5e)], [3, span(0x1f300, 0x1f64f)], [1, span(0x1f900, 0x1f9ff)],
  [1, oneOf('\u200d\ufe0f')], [1, span(0x1d400, 0x1d7ff)], [1, span(0x2160, 0x2188)], [2, span(0x2000, 0x2bff)],
];
const totalWeight = classes.reduce((sum, [weight]) => sum + weight, 0);
function randomCharacter() {
  let r = random() * totalWeight;
  for (const [weight, draw] of classes) {
    if ((r -= weight) < 0) return draw();
  }
  return ' ';
}
for (let i = 0; i < 300; ++i) {
  const length = 1 + Math.floor(random() * 80);
  let text = '';
  for (let j = 0; j < length; ++j) text += randomCharacter();
  add(`random ${i}`, text);
}

for (const c of cases) {
  c.tokens = encode(c.text);
  if (c.tokens.some(t => typeof t !== 'number')) throw new Error(`Encoder.js gave a non-number token for ${c.name}`);
  if (decode(c.tokens) !== c.text) throw new Error(`Encoder.js does not decode ${c.name} back`);
}
const lines = cases.map(c => '  ' + JSON.stringify(c));
const out = path.join(__dirname, 'encoder_js_reference.json');
fs.writeFileSync(out, '{"generator": "tests/text/make_encoder_js_reference.js", "encoder": "gpt-3-encoder 1.1.4 Encoder.js", ' +
  '"cases": [\n' + lines.join(',\n') + '\n]}\n');
console.log(`wrote ${cases.length} cases to ${out}`);
