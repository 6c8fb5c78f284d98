'use strict';
// Loads the Node build of the package for the tests; the case runner itself
// lives in evaluate.js so that the browser check can share it.

const path = require('node:path');
const fs = require('node:fs');
const { evaluate, run } = require('./evaluate.js');

const ROOT = path.resolve(__dirname, '..', '..');
const PKG = path.join(ROOT, 'wasm', 'pkg', 'node');

function loadPackage() {
  if (!fs.existsSync(path.join(PKG, 'tidings_core.js'))) {
    throw new Error(`${PKG} is missing: run scripts/build-wasm first`);
  }
  return require(PKG);
}

module.exports = { ROOT, PKG, loadPackage, evaluate, run };
