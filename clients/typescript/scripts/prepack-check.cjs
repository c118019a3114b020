// Run by `npm pack` and `npm publish` before the build: the build needs the dev dependencies
// (tsc among them), which only `npm ci` (or `npm install`) brings.
const fs = require("node:fs");
const path = require("node:path");
if (!fs.existsSync(path.join(__dirname, "..", "node_modules", "typescript", "package.json"))) {
  console.error("npm pack builds dist/ with the dev dependencies: run `npm ci` here first.");
  process.exit(1);
}
