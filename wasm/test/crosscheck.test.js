'use strict';
// Random cases generated and answered by Rust (core/examples/crosscheck.rs),
// answered again by the WebAssembly build: the two must agree exactly,
// including error messages.
//
// CROSSCHECK_FILE=path  read cases from a file made beforehand (fast, for CI);
// otherwise spawn cargo: CROSSCHECK_SEED (default random) and
// CROSSCHECK_COUNT (default 2000) choose the cases.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const { execFileSync } = require('node:child_process');
const { ROOT, loadPackage, run } = require('../lib/ops.js');

function loadCases() {
  if (process.env.CROSSCHECK_FILE) {
    const seed = process.env.CROSSCHECK_SEED ? ` (seed ${process.env.CROSSCHECK_SEED})` : '';
    return {
      source: `${process.env.CROSSCHECK_FILE}${seed}`,
      text: fs.readFileSync(process.env.CROSSCHECK_FILE, 'utf8'),
    };
  }
  const seed = process.env.CROSSCHECK_SEED || String(Math.floor(Math.random() * 2 ** 32));
  const count = process.env.CROSSCHECK_COUNT || '2000';
  const text = execFileSync(
    'cargo', ['run', '-q', '-p', 'tidings-core', '--example', 'crosscheck', '--', seed, count],
    { cwd: ROOT, encoding: 'utf8', maxBuffer: 1 << 30, stdio: ['ignore', 'pipe', 'inherit'] },
  );
  return { source: `seed ${seed}, ${count} cases (CROSSCHECK_SEED=${seed} to repeat)`, text };
}

test('wasm agrees with Rust on random cases', (ctx) => {
  const t = loadPackage();
  const { source, text } = loadCases();
  const cases = text.split('\n').filter((l) => l.length > 0).map((l) => JSON.parse(l));
  assert.ok(cases.length > 0, `no cases from ${source}`);
  const failures = [];
  for (const c of cases) {
    const actual = run(t, c);
    try {
      assert.deepEqual(actual, c.expect);
    } catch {
      failures.push({ op: c.op, input: c.input, rust: c.expect, wasm: actual });
    }
  }
  assert.equal(failures.length, 0,
    `${failures.length} of ${cases.length} cases differ (${source}); first:\n${JSON.stringify(failures.slice(0, 3), null, 2)}`);
  ctx.diagnostic(`${cases.length} cases agree (${source})`);
});
