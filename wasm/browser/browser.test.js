'use strict';
// The ES-module build (wasm/pkg/web) in headless Chromium: loads the package
// the way a front end does (import + init over HTTP) and checks every golden
// vector (core/golden.json and core/preferences.json), plus the crosscheck
// file when CROSSCHECK_FILE is set. Run through
// wasm/browser/run, which installs playwright-core and Chromium if missing.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');

const ROOT = path.resolve(__dirname, '..', '..');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const TYPES = { '.js': 'text/javascript', '.wasm': 'application/wasm', '.json': 'application/json', '.html': 'text/html' };
// Only these trees are served: the page needs nothing else from the repo.
const SERVED = ['/wasm/pkg/web/', '/wasm/lib/', '/wasm/browser/', '/core/golden.json'];

function serve() {
  const server = http.createServer((req, res) => {
    const url = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    const file = path.join(ROOT, path.normalize(url));
    if (!SERVED.some((p) => url.startsWith(p)) || !file.startsWith(ROOT) || !fs.existsSync(file)) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { 'content-type': TYPES[path.extname(file)] || 'application/octet-stream' });
    fs.createReadStream(file).pipe(res);
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

test('the web package reproduces Rust in headless Chromium', async (ctx) => {
  const { chromium } = require('playwright-core');
  const server = await serve();
  const base = `http://127.0.0.1:${server.address().port}`;
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  });
  try {
    const page = await browser.newPage();
    await page.goto(`${base}/wasm/browser/index.html`);
    const golden = JSON.parse(fs.readFileSync(path.join(ROOT, 'core', 'golden.json'), 'utf8')).cases;
    // The preference vectors too: the panel must decide what fan-out decides.
    const preferences = JSON.parse(fs.readFileSync(path.join(ROOT, 'core', 'preferences.json'), 'utf8')).cases;
    const extra = process.env.CROSSCHECK_FILE
      ? fs.readFileSync(process.env.CROSSCHECK_FILE, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l))
      : [];
    const cases = golden.concat(preferences, extra);
    const results = await page.evaluate(async (cs) => {
      const m = await import('/wasm/pkg/web/tidings_core.js');
      await m.default();
      return cs.map((c) => window.tidingsCases.run(m, c));
    }, cases);
    let differ = 0;
    cases.forEach((c, i) => {
      try {
        assert.deepEqual(results[i], c.expect);
      } catch {
        differ += 1;
        if (differ <= 3) ctx.diagnostic(`differs: ${JSON.stringify({ c, browser: results[i] })}`);
      }
    });
    assert.equal(differ, 0, `${differ} of ${cases.length} cases differ in the browser`);
    ctx.diagnostic(`${cases.length} cases agree in ${await browser.version()}`);
  } finally {
    await browser.close();
    server.close();
  }
});
