// The browser's download for the front-end kit, gzipped as the server serves
// its files (best compression, file by file):
// - a page with <tidings-inbox>: the element and its modules (server/inbox/)
//   and the WebAssembly core (wasm/pkg/web). The element does not load
//   @tidings/client, so this is what such a page waits for; it must stay
//   within the budget (FRONT_END_GZIP_BUDGET bytes, default 80 KiB);
// - @tidings/client in a browser: its browser entry (dist/, without
//   ./server, which runs on a backend) and its one dependency, openapi-fetch;
//   printed, with the sum of both for a page that uses the two.
// Run by ./pack, after the build.
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { constants, gzipSync } from "node:zlib";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..", "..");
const budget = Number(process.env.FRONT_END_GZIP_BUDGET ?? 80 * 1024);

function measure(title, files) {
  let total = 0;
  const rows = files.map((file) => {
    const size = gzipSync(readFileSync(file), { level: constants.Z_BEST_COMPRESSION }).length;
    total += size;
    return `${String(size).padStart(7)}  ${relative(root, file)}`;
  });
  console.log(`${title}, gzip:\n${rows.join("\n")}\n${String(total).padStart(7)}  in all`);
  return total;
}

const element = measure("a page with <tidings-inbox>", [
  ...["tidings-inbox.js", "inbox.js", "model.js", "preferences.js", "inbox.css"].map((f) =>
    join(root, "server", "inbox", f),
  ),
  ...["tidings_core.js", "tidings_core_bg.wasm"].map((f) => join(root, "wasm", "pkg", "web", f)),
]);
const client = measure("@tidings/client in a browser", [
  ...readdirSync(join(here, "dist"))
    .filter((f) => f.endsWith(".js") && f !== "server.js")
    .map((f) => join(here, "dist", f)),
  fileURLToPath(import.meta.resolve("openapi-fetch")),
]);
console.log(`element page ${element} bytes (budget ${budget}); with @tidings/client too: ${element + client}`);
if (element > budget) {
  console.error(`a page with <tidings-inbox> downloads ${element} bytes gzipped, over the budget of ${budget}`);
  process.exit(1);
}
