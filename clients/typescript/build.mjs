// Builds the package into dist/: the compiled sources with their
// declarations, and the generated schema types, which tsc does not copy
// (src/schema.d.ts is a declaration file, so it has no output of its own).
import { execFileSync } from "node:child_process";
import { copyFileSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
rmSync(join(here, "dist"), { recursive: true, force: true });
execFileSync(join(here, "node_modules/.bin/tsc"), ["-p", join(here, "tsconfig.build.json")], {
  stdio: "inherit",
});
copyFileSync(join(here, "src/schema.d.ts"), join(here, "dist/schema.d.ts"));
