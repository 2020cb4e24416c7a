// The dashboard's load benchmark: the time to interactive of a service's page in Chromium, for a
// small service and a large one, beside a baseline measured in the same run (the sign-in page:
// the same static files and start-up, no API data), so that a shared, noisy machine compares
// like with like. Prints one line per size and the gzip sizes of the first load.
//
//   BULKHEAD_URL=http://127.0.0.1:8080 EMAIL=admin@bulkhead.local PASSWORD=… npm run bench-tti
//
// The user must not have terms to accept. Seeds, through the API, a project with two services
// over gcp and aws (the simulated providers): `small` (3 instances, 1 deployment) and `large`
// (LARGE_DEPLOYMENTS deployments, default 50, the last with LARGE_REPLICAS instances, default
// 60). TTI is the time from navigating to the page (session restored from the refresh cookie,
// as on a reload) until its Deploy button is enabled and the deployments and instances are shown.
// ROUNDS (default 15) rounds, each in a random order after one to warm up; the median and the 90th percentile of each are printed.
import zlib from "node:zlib";
import { readFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { chromium } from "playwright-core";

const root = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const BASE = (process.env.BULKHEAD_URL || "http://127.0.0.1:8080").replace(/\/$/, "");
const EMAIL = process.env.EMAIL;
const PASSWORD = process.env.PASSWORD;
const ROUNDS = Number(process.env.ROUNDS || 15);
const LARGE_DEPLOYMENTS = Number(process.env.LARGE_DEPLOYMENTS || 50);
const LARGE_REPLICAS = Number(process.env.LARGE_REPLICAS || 60);
if (!EMAIL || !PASSWORD) {
  console.error("EMAIL and PASSWORD (a user of BULKHEAD_URL) are needed");
  process.exit(2);
}

async function call(token, method, url, body) {
  const response = await fetch(`${BASE}${url}`, {
    method,
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  if (!response.ok) throw new Error(`${method} ${url}: ${response.status} ${text}`);
  return { body: text ? JSON.parse(text) : null, etag: response.headers.get("etag") };
}

async function login() {
  const response = await fetch(`${BASE}/v1/auth/login`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ email: EMAIL, password: PASSWORD }),
  });
  if (!response.ok) throw new Error(`login: ${response.status} ${await response.text()}`);
  return (await response.json()).access_token;
}

async function deployed(token, project, service) {
  const { body } = await call(token, "POST", `/v1/projects/${project}/services/${service}/deployments`, {});
  const url = `/v1/projects/${project}/services/${service}/deployments/${body.id}`;
  for (let i = 0; i < 1200; i++) {
    const { body: now } = await call(token, "GET", url);
    if (["healthy", "failed", "cancelled", "superseded"].includes(now.state)) {
      if (now.state !== "healthy") throw new Error(`deployment #${now.number} ended ${now.state}: ${now.reason}`);
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error("a deployment did not finish within 120 s");
}

async function seed() {
  const token = await login();
  const suffix = Math.random().toString(36).slice(2, 8);
  const { body: project } = await call(token, "POST", "/v1/projects", { name: `tti-${suffix}` });
  const { body: environment } = await call(token, "POST", `/v1/projects/${project.id}/environments`, { name: "production" });
  const services = {};
  for (const name of ["small", "large"]) {
    const { body: service } = await call(token, "POST", `/v1/projects/${project.id}/services`, {
      environment_id: environment.id,
      name,
      port: 8080,
      replicas: 3,
      source: { type: "artifact", image: "shop/web:1" },
      placement: { providers: [{ name: "gcp" }, { name: "aws" }] },
    });
    services[name] = service.id;
  }
  await deployed(token, project.id, services.small);
  for (let i = 1; i < LARGE_DEPLOYMENTS; i++) await deployed(token, project.id, services.large);
  const serviceUrl = `/v1/projects/${project.id}/services/${services.large}`;
  const { etag } = await call(token, "GET", serviceUrl);
  const response = await fetch(`${BASE}${serviceUrl}`, {
    method: "PATCH",
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json", "If-Match": etag },
    body: JSON.stringify({ replicas: LARGE_REPLICAS }),
  });
  if (!response.ok) throw new Error(`PATCH replicas: ${response.status} ${await response.text()}`);
  await deployed(token, project.id, services.large);
  return { project: project.id, services };
}

function percentile(values, p) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

const started = Date.now();
const { project, services } = await seed();
console.log(`seeded in ${((Date.now() - started) / 1000).toFixed(1)} s`);

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox"],
});
// Signed in once: each measured load restores the session from the cookie, as a reload does.
const signedIn = await browser.newContext({ viewport: { width: 1280, height: 900 } });
const page = await signedIn.newPage();
await page.goto(`${BASE}/`);
await page.getByLabel("Email").fill(EMAIL);
await page.getByLabel("Password").fill(PASSWORD);
await page.getByRole("button", { name: "Sign in" }).click();
await page.getByRole("heading", { name: "Projects", exact: true }).waitFor();
const signedOut = await browser.newContext({ viewport: { width: 1280, height: 900 } });
const anonymous = await signedOut.newPage();

async function signInPageTti() {
  await anonymous.goto("about:blank");
  const t0 = performance.now();
  await anonymous.goto(`${BASE}/`);
  await anonymous.waitForFunction(() => {
    const button = [...document.querySelectorAll("button")].find((b) => b.textContent === "Sign in");
    return button !== undefined && !button.disabled;
  }, null, { polling: "raf" });
  return performance.now() - t0;
}

async function servicePageTti(service, instances) {
  await page.goto("about:blank");
  const t0 = performance.now();
  await page.goto(`${BASE}/#/projects/${project}/services/${service}`);
  await page.waitForFunction((instances) => {
    const deploy = [...document.querySelectorAll("button")].find((b) => b.textContent === "Deploy");
    const deployments = document.querySelector('[aria-label="Deployments table"] tbody tr');
    const rows = document.querySelectorAll('[aria-label="Instances table"] tbody tr').length;
    return deploy !== undefined && !deploy.disabled && deployments !== null && rows >= instances;
  }, instances, { polling: "raf", timeout: 20_000 });
  return performance.now() - t0;
}

const times = { baseline: [], small: [], large: [] };
const measure = {
  baseline: () => signInPageTti(),
  small: () => servicePageTti(services.small, 3),
  large: () => servicePageTti(services.large, LARGE_REPLICAS),
};
for (let round = 0; round < ROUNDS + 1; round++) {
  // Each round in another order, so that no size always follows another; round 0 warms up.
  const order = Object.keys(measure).sort(() => Math.random() - 0.5);
  for (const name of order) {
    const ms = await measure[name]();
    if (round > 0) times[name].push(ms);
  }
}
await browser.close();

const base = percentile(times.baseline, 50);
const sizes = {
  baseline: "sign-in page",
  small: "service, 1 deployment, 3 instances",
  large: `service, ${LARGE_DEPLOYMENTS} deployments, ${LARGE_REPLICAS} instances`,
};
for (const [name, values] of Object.entries(times)) {
  const median = percentile(values, 50);
  console.log(
    `${name.padEnd(8)} ${sizes[name].padEnd(40)} median ${median.toFixed(0)} ms, p90 ${percentile(values, 90).toFixed(0)} ms, ${(median / base).toFixed(2)}x baseline`,
  );
}
for (const file of ["index.html", "app.js", "app.css"]) {
  const bytes = await readFile(path.join(root, "dist", file));
  console.log(`${file}: ${bytes.length} B, ${zlib.gzipSync(bytes, { level: 9 }).length} B gzip`);
}
