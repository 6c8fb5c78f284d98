// Builds the package into dist/: the compiled sources (without comments)
// with their declarations (with them); the declaration files tsc does not copy (src/*.d.ts have no
// output of their own: the generated schema types and the element's types);
// and @tidings/client/element, the <tidings-inbox> element as the server
// serves it (server/inbox/) with the WebAssembly core it loads
// (wasm/pkg/web, written by scripts/build-wasm). The element's modules
// import the package's own stream, errors, retry and consistency modules,
// which sit beside them in dist/ as they do under the server's /inbox/.
import { execFileSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..", "..");
const dist = join(here, "dist");
rmSync(dist, { recursive: true, force: true });
// The JavaScript without comments (a browser downloads it; the docs are in
// the declarations), then the declarations with them.
const tsc = (...args) =>
  execFileSync(join(here, "node_modules/.bin/tsc"), ["-p", join(here, "tsconfig.build.json"), ...args], {
    stdio: "inherit",
  });
tsc("--removeComments", "--declaration", "false");
tsc("--emitDeclarationOnly");
for (const declarations of ["schema.d.ts", "tidings-inbox.d.ts"]) {
  copyFileSync(join(here, "src", declarations), join(dist, declarations));
}
for (const file of ["tidings-inbox.js", "inbox.js", "model.js", "preferences.js", "inbox.css"]) {
  copyFileSync(join(root, "server", "inbox", file), join(dist, file));
}
const core = join(root, "wasm", "pkg", "web");
if (!existsSync(join(core, "tidings_core_bg.wasm"))) {
  throw new Error(`${core} has no WebAssembly core: run scripts/build-wasm first`);
}
mkdirSync(join(dist, "core"));
for (const file of ["tidings_core.js", "tidings_core_bg.wasm", "tidings_core.d.ts"]) {
  copyFileSync(join(core, file), join(dist, "core", file));
}
