'use strict';
// Every vector in core/golden.json, reproduced by the WebAssembly build byte
// for byte: keys, digests, lock keys and cursors must never differ between
// the server and the browser (ARCHITECTURE.md, invariant 5).

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { ROOT, loadPackage, run } = require('../lib/ops.js');

const golden = JSON.parse(fs.readFileSync(path.join(ROOT, 'core', 'golden.json'), 'utf8'));
const t = loadPackage();

test('golden.json covers every operation', () => {
  const ops = new Set(golden.cases.map((c) => c.op));
  for (const op of ['derive_key', 'parse_readable', 'lock_key', 'encode_cursor', 'decode_cursor',
    'advance', 'classify', 'unread_count', 'fanout', 'retry']) {
    assert.ok(ops.has(op), `no golden case for ${op}`);
  }
});

golden.cases.forEach((c, i) => {
  test(`golden #${i} ${c.op} matches Rust`, () => {
    assert.deepEqual(run(t, c), c.expect, JSON.stringify(c.input));
  });
});
