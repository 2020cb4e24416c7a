// Prepares a fresh local platform for the browser test: publishes terms and creates a platform
// administrator and a plain user (with the bootstrap token). Prints the variables to export.
//   BULKHEAD_URL=http://127.0.0.1:18080 BULKHEAD_TOKEN=<admin token> node scripts/dev-seed.mjs
const base = (process.env.BULKHEAD_URL || "http://127.0.0.1:18080").replace(/\/$/, "");
const token = process.env.BULKHEAD_TOKEN;
if (!token) throw new Error("BULKHEAD_TOKEN is not set");
const stamp = Date.now().toString(36);

async function call(method, path, body) {
  const r = await fetch(`${base}${path}`, {
    method,
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  const text = await r.text();
  if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${text}`);
  return JSON.parse(text);
}

await call("POST", "/v1/terms", { version: `dev-${stamp}`, url: "https://example.com/terms", summary: "Terms for the dashboard's browser test." });
const admin = { email: `admin-${stamp}@example.com`, password: `admin-password-${stamp}` };
const viewer = { email: `viewer-${stamp}@example.com`, password: `viewer-password-${stamp}` };
await call("POST", "/v1/users", { email: admin.email, name: "Dashboard Admin", password: admin.password, is_admin: true });
await call("POST", "/v1/users", { email: viewer.email, name: "Dashboard Viewer", password: viewer.password, is_admin: false });
console.log(`export ADMIN_EMAIL=${admin.email} ADMIN_PASSWORD=${admin.password} VIEWER_EMAIL=${viewer.email} VIEWER_PASSWORD=${viewer.password}`);
