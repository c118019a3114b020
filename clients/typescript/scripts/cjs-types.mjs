// Writes a .d.cts beside every .d.ts of dist/src: the package's types for a CommonJS
// TypeScript project (module node16), which may not import ES module declarations (TS1479).
// Relative imports point at the .cjs twins. At run time require() loads the ES module itself
// (Node 20.19+ / 22.12+, this package's engines).
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("../dist/src", import.meta.url));
for (const entry of readdirSync(root, { recursive: true, withFileTypes: true })) {
  if (!entry.isFile() || !entry.name.endsWith(".d.ts")) continue;
  const path = join(entry.parentPath, entry.name);
  const text = readFileSync(path, "utf8").replace(/(["'])(\.\.?\/[^"']+)\.js\1/g, "$1$2.cjs$1");
  writeFileSync(path.replace(/\.d\.ts$/, ".d.cts"), text);
}
