'use strict';
// core/preferences.json, resolved by the WebAssembly build: the inbox page's
// preference panel must show exactly what the server decides at fan-out.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { ROOT, loadPackage, run } = require('../lib/ops.js');

const vectors = JSON.parse(fs.readFileSync(path.join(ROOT, 'core', 'preferences.json'), 'utf8'));
const t = loadPackage();

vectors.cases.forEach((c, i) => {
  test(`preferences #${i} ${c.name}`, () => {
    assert.deepEqual(run(t, c), c.expect, JSON.stringify(c.input));
  });
});
