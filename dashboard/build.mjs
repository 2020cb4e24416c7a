// Builds the dashboard into dist/ (or $DASHBOARD_OUT): index.html, app.js and app.css, minified,
// without source maps or anything that changes from one build to the next, so that a rebuild
// is byte-identical to the committed files (the server embeds them).
import { build } from "esbuild";
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.dirname(fileURLToPath(import.meta.url));
const out = path.resolve(process.env.DASHBOARD_OUT || path.join(root, "dist"));

const result = await build({
  absWorkingDir: root,
  entryPoints: { app: "src/main.tsx" },
  bundle: true,
  minify: true,
  sourcemap: false,
  legalComments: "none",
  format: "iife",
  target: ["es2022", "chrome110", "firefox115", "safari16"],
  jsx: "automatic",
  jsxImportSource: "preact",
  charset: "utf8",
  write: false,
  outdir: out,
  // The typed client lives in ../openapi/typescript and has no node_modules of its own.
  alias: {
    "@bulkhead/client": path.join(root, "../openapi/typescript/src/index.ts"),
    "openapi-fetch": path.join(root, "node_modules/openapi-fetch"),
  },
  define: { "process.env.NODE_ENV": '"production"' },
  logLevel: "warning",
});

await mkdir(out, { recursive: true });
const files = new Map();
for (const file of result.outputFiles) {
  files.set(path.basename(file.path), file.contents);
}
for (const name of ["app.js", "app.css"]) {
  if (!files.has(name)) throw new Error(`esbuild wrote no ${name}`);
}
for (const name of ["index.html", "app.js", "app.css"]) {
  await rm(path.join(out, name), { force: true });
}
await writeFile(path.join(out, "app.js"), files.get("app.js"));
await writeFile(path.join(out, "app.css"), files.get("app.css"));
await writeFile(path.join(out, "index.html"), await readFile(path.join(root, "src/index.html")));
for (const name of ["index.html", "app.js", "app.css"]) {
  console.log(`${path.relative(process.cwd(), path.join(out, name)) || name}`);
}
