'use strict';
// Time to first render of the inbox page on seeded data, in headless Chromium:
// from navigation start to the first page of items on screen (the page's own
// `firstRenderAt`: HTML, modules, wasm, token, GET /v1/feed and the DOM), over
// several cold loads (a new browser context each, so nothing is cached), plus
// the bytes the page's files took on the wire. A measurement, not a test.
//
// Against the bench's tier S data (ARCHITECTURE.md's code map, `tests/inbox/`:
// first render is measured on the bench's seeded data):
//   BENCH_PG_PORT=55443 scripts/bench --tier S --only health   # seeds tidings_bench_s
//   # start that cluster again (scripts/bench stops it), then:
//   DATABASE_URL=postgres://postgres@127.0.0.1:55443/tidings_bench_s \
//     TIDINGS_LISTEN=127.0.0.1:8099 target/debug/tidings serve &
//   TIDINGS_URL=http://127.0.0.1:8099 INBOX_API_KEY=tdk_bench_0 INBOX_USERS=user-7,wide-reader \
//     NODE_PATH=wasm/node_modules node tests/inbox/first-render.js
// Prints one JSON object per user.

const { chromium } = require('playwright-core');

const BASE = process.env.TIDINGS_URL;
const KEY = process.env.INBOX_API_KEY;
const USERS = (process.env.INBOX_USERS ?? '').split(',').filter(Boolean);
const LOADS = Number(process.env.INBOX_LOADS ?? 7);

async function token(user) {
  const response = await fetch(`${BASE}/v1/user-tokens`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ user_id: user, ttl_seconds: 3600 }),
  });
  if (!response.ok) throw new Error(`user token: ${response.status} ${await response.text()}`);
  return (await response.json()).token;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

(async () => {
  if (!BASE || !KEY || !USERS.length) throw new Error('set TIDINGS_URL, INBOX_API_KEY, INBOX_USERS');
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  });
  try {
    for (const user of USERS) {
      const t = await token(user);
      const times = [];
      let items = 0;
      let bytes = 0;
      for (let i = 0; i < LOADS; i++) {
        const context = await browser.newContext({ viewport: { width: 720, height: 900 } });
        const page = await context.newPage();
        await page.goto(`${BASE}/inbox/#token=${t}`);
        await page.waitForFunction(() => window.tidingsInbox?.stats().firstRenderAt !== undefined,
          null, { timeout: 30000 });
        times.push(await page.evaluate(() => window.tidingsInbox.stats().firstRenderAt));
        items = await page.$$eval('.tdg-item', (l) => l.length);
        bytes = await page.evaluate(() => [performance.getEntriesByType('navigation')[0],
          ...performance.getEntriesByType('resource').filter((r) => r.name.includes('/inbox/'))]
          .reduce((n, r) => n + r.transferSize, 0));
        await context.close();
      }
      console.log(JSON.stringify({
        user, items, loads: LOADS,
        first_render_ms: { median: Math.round(median(times)), min: Math.round(Math.min(...times)),
          max: Math.round(Math.max(...times)), first_load: Math.round(times[0]) },
        page_transfer_bytes: bytes,
      }));
    }
  } finally {
    await browser.close();
  }
})().catch((err) => {
  console.error(err);
  process.exit(1);
});
