// A development server: serves dist/ at / and /assets/{app.js,app.css} with the server's CSP,
// and proxies /v1/* and /healthz to $BULKHEAD_URL (method, headers, cookies, body; responses
// streamed, so Server-Sent Events pass as they come). For development and the browser test only.
//
//   BULKHEAD_URL=http://127.0.0.1:18080 PORT=18081 npm run serve
import http from "node:http";
import { readFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const dist = path.resolve(process.env.DASHBOARD_OUT || path.join(root, "dist"));
const upstream = new URL(process.env.BULKHEAD_URL || "http://127.0.0.1:8080");
const port = Number(process.env.PORT || 18081);
const host = process.env.HOST || "127.0.0.1";

export const CSP =
  "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

const ASSETS = {
  "/": ["index.html", "text/html; charset=utf-8"],
  "/index.html": ["index.html", "text/html; charset=utf-8"],
  "/assets/app.js": ["app.js", "text/javascript; charset=utf-8"],
  "/assets/app.css": ["app.css", "text/css; charset=utf-8"],
};

function proxy(req, res) {
  const headers = { ...req.headers, host: upstream.host };
  const out = http.request(
    { protocol: upstream.protocol, hostname: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers },
    (up) => {
      res.writeHead(up.statusCode ?? 502, up.statusMessage, up.rawHeaders);
      res.flushHeaders();
      up.pipe(res);
      up.on("error", () => res.destroy());
    },
  );
  out.on("error", (e) => {
    if (!res.headersSent) {
      res.writeHead(502, { "content-type": "application/problem+json" });
      res.end(JSON.stringify({ type: "about:blank", title: "Bad Gateway", status: 502, code: "error", detail: `proxy: ${e.message}` }));
    } else res.destroy();
  });
  res.on("close", () => out.destroy());
  req.pipe(out);
}

const server = http.createServer(async (req, res) => {
  const url = new URL(req.url ?? "/", "http://x");
  if (url.pathname.startsWith("/v1/") || url.pathname === "/healthz" || url.pathname === "/readyz") {
    proxy(req, res);
    return;
  }
  const asset = ASSETS[url.pathname];
  if (!asset || (req.method !== "GET" && req.method !== "HEAD")) {
    res.writeHead(404, { "content-type": "text/plain", "content-security-policy": CSP });
    res.end("not found\n");
    return;
  }
  try {
    const body = await readFile(path.join(dist, asset[0]));
    res.writeHead(200, {
      "content-type": asset[1],
      "content-security-policy": CSP,
      "x-content-type-options": "nosniff",
      "referrer-policy": "no-referrer",
      "cache-control": "no-cache",
    });
    res.end(req.method === "HEAD" ? undefined : body);
  } catch (e) {
    res.writeHead(500, { "content-type": "text/plain" });
    res.end(String(e));
  }
});
server.listen(port, host, () => {
  console.log(`dashboard on http://${host}:${port}/ -> ${upstream.origin}`);
});
