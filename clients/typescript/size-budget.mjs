// The browser's download for the front-end kit, gzipped as the server serves
// its files (best compression, file by file), measured on the built package
// (dist/):
// - a page with <tidings-inbox> (@tidings/client/element, or the server's
//   /inbox/tidings-inbox.js: the same files): the element's modules, the
//   package's stream, errors, retry and consistency modules it is built on,
//   and the WebAssembly core. This is what such a page waits for; it must
//   stay within the budget (FRONT_END_GZIP_BUDGET bytes, default 80 KB:
//   80,000 bytes);
// - the rest of @tidings/client a page may add (the typed REST client,
//   paging, and openapi-fetch): printed, with the sum of both.
// Run by ./pack, after the build.
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { constants, gzipSync } from "node:zlib";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..", "..");
const budget = Number(process.env.FRONT_END_GZIP_BUDGET ?? 80_000);

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

const elementModules = [
  "tidings-inbox.js",
  "inbox.js",
  "model.js",
  "preferences.js",
  "inbox.css",
  "stream.js",
  "errors.js",
  "retry.js",
  "consistency.js",
  join("core", "tidings_core.js"),
  join("core", "tidings_core_bg.wasm"),
];
const element = measure(
  "a page with <tidings-inbox>",
  elementModules.map((f) => join(here, "dist", f)),
);
const client = measure("the rest of @tidings/client in a browser", [
  ...readdirSync(join(here, "dist"))
    .filter((f) => f.endsWith(".js") && f !== "server.js" && !elementModules.includes(f))
    .map((f) => join(here, "dist", f)),
  fileURLToPath(import.meta.resolve("openapi-fetch")),
]);
console.log(`element page ${element} bytes (budget ${budget}); with the rest of @tidings/client: ${element + client}`);
if (element > budget) {
  console.error(`a page with <tidings-inbox> downloads ${element} bytes gzipped, over the budget of ${budget}`);
  process.exit(1);
}
