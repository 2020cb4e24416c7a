// The dashboard's browser test: Debian's Chromium, driven by playwright-core, against a running
// server (BULKHEAD_URL serves the dashboard and /v1). See dashboard/README.md for the variables.
// Prints `ok - <step>` / `not ok - <step>: <why>` and `N passed, M failed`; exits 1 on a failure.
import crypto from "node:crypto";
import { readFile, mkdir } from "node:fs/promises";
import http from "node:http";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";
import zlib from "node:zlib";

import { chromium } from "playwright-core";

const require = createRequire(import.meta.url);
const root = path.dirname(path.dirname(fileURLToPath(import.meta.url)));

const BASE = (process.env.BULKHEAD_URL || "http://127.0.0.1:18081").replace(/\/$/, "");
const ADMIN = { email: need("ADMIN_EMAIL"), password: need("ADMIN_PASSWORD") };
const VIEWER = { email: need("VIEWER_EMAIL"), password: need("VIEWER_PASSWORD") };
const FAULTS = process.env.GCP_FAULTS_URL || "";
/** An OpenID Provider configured on the server (its name), and the account to sign in as there. */
const OIDC = process.env.OIDC_PROVIDER || "";
const OIDC_ACCOUNT = process.env.OIDC_ACCOUNT || "";
const PROVIDERS = (process.env.PROVIDERS || "gcp,aws,metal").split(",").map((s) => s.trim()).filter(Boolean);
const SHOTS = process.env.SCREENSHOT_DIR || "";
const TIMEOUT_SECS = Number(process.env.TEST_TIMEOUT_SECS || 420);
const DEPLOY_TIMEOUT = 180_000;

function need(name) {
  const v = process.env[name];
  if (!v) {
    console.error(`${name} is not set`);
    process.exit(2);
  }
  return v;
}

let passed = 0;
let failed = 0;
const results = [];
/** Errors the page reported (CSP violations, uncaught exceptions), in order. */
const pageErrors = [];

function finish() {
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed > 0 ? 1 : 0);
}

const overall = setTimeout(() => {
  console.log(`not ok - overall: the test took more than ${TIMEOUT_SECS} s`);
  failed++;
  finish();
}, TIMEOUT_SECS * 1000);
overall.unref();

/** Runs a step; a step fails on an exception or on a page error raised while it ran. */
async function step(name, fn) {
  const before = pageErrors.length;
  const t0 = Date.now();
  try {
    await fn();
    const errs = pageErrors.slice(before);
    if (errs.length > 0) throw new Error(`page errors: ${errs.join(" | ")}`);
    passed++;
    results.push([name, true]);
    console.log(`ok - ${name} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
    return true;
  } catch (e) {
    failed++;
    results.push([name, false]);
    console.log(`not ok - ${name}: ${String(e?.message ?? e).split("\n").slice(0, 6).join(" ")}`);
    // Where the page was when it failed: for a failure seen only under load.
    const headings = await page.locator("h1").allInnerTexts().catch(() => []);
    const alerts = await page.getByRole("alert").allInnerTexts().catch(() => []);
    console.log(`# at ${page.url()}; h1: ${JSON.stringify(headings)}; alerts: ${JSON.stringify(alerts)}`);
    return false;
  }
}

function check(cond, why) {
  if (!cond) throw new Error(why);
}

async function apiLogin(who) {
  const r = await fetch(`${BASE}/v1/auth/login`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ email: who.email, password: who.password }),
  });
  check(r.ok, `POST /v1/auth/login answered ${r.status}`);
  return (await r.json()).access_token;
}

async function api(token, method, p, body) {
  const r = await fetch(`${BASE}${p}`, {
    method,
    headers: { Authorization: `Bearer ${token}`, ...(body ? { "Content-Type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  let json;
  try {
    json = await r.json();
  } catch {
    json = undefined;
  }
  return { status: r.status, body: json };
}

async function shot(page, name) {
  if (!SHOTS) return;
  await mkdir(SHOTS, { recursive: true });
  await page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox"],
});
const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: BASE });
const page = await context.newPage();
page.setDefaultTimeout(20_000);
page.on("pageerror", (e) => pageErrors.push(`uncaught: ${e.message}`));
page.on("console", (m) => {
  if (m.type() !== "error") return;
  const text = m.text();
  // Chromium logs every 4xx/5xx fetch as "Failed to load resource": the API's refusals are
  // expected (and shown by the page); CSP violations and script errors are not.
  if (/Failed to load resource/.test(text)) return;
  pageErrors.push(`console: ${text}`);
});
page.on("dialog", (d) => void d.accept());

const heading = (name) => page.getByRole("heading", { level: 1, name });
const button = (name) => page.getByRole("button", { name, exact: true });

async function signIn(who) {
  await page.goto(`${BASE}/#/projects`);
  await heading("Sign in to Bulkhead").waitFor();
  await page.getByLabel("Email").fill(who.email);
  await page.getByLabel("Password").fill(who.password);
  await button("Sign in").click();
  await page.getByRole("heading", { level: 1, name: /^(Terms of service|Projects)$/ }).waitFor();
  if (await heading("Terms of service").isVisible()) {
    await button("Accept").click();
    await heading("Projects").waitFor();
    return true;
  }
  return false;
}

async function signOut() {
  const toggle = page.getByRole("button", { name: "Menu" });
  if (await toggle.isVisible()) await toggle.click();
  await button("Sign out").click();
  await heading("Sign in to Bulkhead").waitFor();
}

/** The row of deployment #n in the deployments table. */
function deploymentRow(n) {
  return page.getByRole("region", { name: "Deployments", exact: true }).getByRole("row").filter({ has: page.getByRole("rowheader", { name: new RegExp(`^#${n}\\b`) }) });
}

async function waitDeployment(n, state, timeout = DEPLOY_TIMEOUT) {
  const row = deploymentRow(n);
  const t0 = Date.now();
  for (;;) {
    const text = (await row.count()) > 0 ? await row.first().innerText() : "";
    if (text.includes(state)) return;
    if (/\b(failed|cancelled)\b/.test(text) && !text.includes(state)) throw new Error(`deployment #${n} is ${text.replace(/\s+/g, " ")}`);
    if (Date.now() - t0 > timeout) throw new Error(`deployment #${n} not ${state} after ${timeout / 1000} s: ${text.replace(/\s+/g, " ")}`);
    await page.waitForTimeout(250);
  }
}

const stamp = Date.now().toString(36);
const state = { projectId: "", serviceId: "", projectName: `dash-${stamp}`, serviceUrl: "", idle: { projectId: "", serviceId: "" } };

// 1. Sign in, the terms, a reload keeps the session, no token in Web Storage.
await step("admin signs in, accepts the terms, stays signed in across a reload", async () => {
  const accepted = await signIn(ADMIN);
  check(accepted, "the terms were not asked for (the admin must not have accepted them yet)");
  await page.reload();
  await heading("Projects").waitFor({ timeout: 10_000 });
  const cookies = await context.cookies();
  check(cookies.some((c) => c.name === "bulkhead_csrf"), `no bulkhead_csrf cookie kept (got ${cookies.map((c) => c.name).join(", ") || "none"})`);
  check(cookies.some((c) => c.name === "__Secure-bulkhead_refresh" && c.httpOnly), "no HttpOnly refresh cookie kept");
  const storage = await page.evaluate(() => JSON.stringify([{ ...localStorage }, { ...sessionStorage }]));
  check(storage === "[{},{}]", `Web Storage is not empty: ${storage.slice(0, 200)}`);
  const tokenish = await page.evaluate(() => document.cookie);
  check(!/eyJ/.test(tokenish), "a JWT is readable in document.cookie");
  await shot(page, "projects");
});

// 2. A project, an environment and a service, through the UI.
await step("create a project, an environment and a service in the UI", async () => {
  await page.goto(`${BASE}/#/projects`);
  await page.getByLabel("Project name").fill(state.projectName);
  await button("Create project").click();
  await heading(`Project ${state.projectName}`).waitFor();
  state.projectId = decodeURIComponent(new URL(page.url()).hash.split("/")[2] ?? "");
  check(state.projectId, `no project id in ${page.url()}`);
  await page.getByLabel("Environment name").fill("production");
  await button("Create environment").click();
  await page.getByRole("region", { name: "Environments", exact: true }).getByRole("rowheader", { name: "production" }).waitFor();
  await page.getByLabel("Service name").fill("web");
  await page.getByLabel("Command", { exact: true }).fill(JSON.stringify(["python3", "-m", "http.server", "$PORT", "--bind", "127.0.0.1"]));
  await page.getByLabel("Port").fill("8080");
  await page.getByLabel("Replicas").fill(String(PROVIDERS.length));
  await page.getByLabel("Placement providers").fill(PROVIDERS.join(", "));
  await button("Create service").click();
  await heading("Service web").waitFor();
  state.serviceUrl = page.url();
  state.serviceId = decodeURIComponent(new URL(page.url()).hash.split("/")[4] ?? "");
  check(state.serviceId, `no service id in ${page.url()}`);
  const spec = await page.getByRole("region", { name: "Spec", exact: true }).innerText();
  for (const p of PROVIDERS) check(spec.includes(p), `the spec does not show provider ${p}: ${spec}`);
});

// 3. Deploy, follow the live events, measure the time to interactive.
await step("deploy from the UI and watch it turn healthy live (TTI)", async () => {
  await page.goto("about:blank");
  const t0 = Date.now();
  await page.goto(state.serviceUrl);
  await page.waitForFunction(() => {
    const deploy = [...document.querySelectorAll("button")].find((b) => b.textContent === "Deploy");
    const list = document.querySelector('[aria-label="Deployments table"]') || [...document.querySelectorAll("p")].find((p) => p.textContent === "Not deployed yet.");
    return deploy !== undefined && !deploy.disabled && list !== null && list !== undefined;
  }, null, { timeout: 20_000, polling: "raf" });
  const tti = Date.now() - t0;
  console.log(`TTI_MS=${tti}`);
  await button("Deploy").click();
  await deploymentRow(1).waitFor();
  const log = page.getByRole("log", { name: "Events of deployment #1" });
  await log.getByText("deployment.queued").or(log.locator("li").first()).first().waitFor({ timeout: 20_000 });
  await waitDeployment(1, "healthy");
  await log.getByText(/deployment\.healthy/).waitFor({ timeout: 15_000 });
  const events = await log.locator("li").count();
  check(events >= 3, `only ${events} events shown live`);
  const instances = page.getByRole("region", { name: "Instances", exact: true });
  for (const p of PROVIDERS) {
    await instances.getByRole("row").filter({ has: page.getByRole("cell", { name: p, exact: true }) }).filter({ has: page.getByRole("cell", { name: "healthy", exact: true }) }).first().waitFor({ timeout: 30_000 });
  }
  // The instances' output, live: python's access log of the health checks, on stderr.
  const output = page.getByRole("log", { name: "Logs of the service" });
  await output.locator("li.stderr").filter({ hasText: "GET / HTTP/1.1" }).first().waitFor({ timeout: 20_000 });
  const shownLines = await output.locator("li").count();
  await output.locator("li").nth(shownLines).waitFor({ timeout: 20_000 });
  await shot(page, "service");
});

// 4. Deploy again, then roll back.
await step("deploy again, then roll back from the UI", async () => {
  await button("Deploy").click();
  await deploymentRow(2).waitFor();
  // The tab is hidden for a while (the stream closes) and shown again (it resumes where it was).
  const setHidden = (hidden) =>
    page.evaluate((h) => {
      Object.defineProperty(document, "hidden", { value: h, configurable: true });
      Object.defineProperty(document, "visibilityState", { value: h ? "hidden" : "visible", configurable: true });
      document.dispatchEvent(new Event("visibilitychange"));
    }, hidden);
  await setHidden(true);
  await page.waitForTimeout(1500);
  await setHidden(false);
  await waitDeployment(2, "healthy");
  const log2 = page.getByRole("log", { name: "Events of deployment #2" });
  await log2.getByText(/deployment\.healthy/).first().waitFor({ timeout: 15_000 });
  const kinds = await log2.locator("li code.kind").allInnerTexts();
  check(kinds.filter((k) => k === "deployment.healthy").length === 1, `events repeated or lost after the tab was hidden: ${kinds.join(", ")}`);
  check(kinds.filter((k) => k === "deployment.queued").length <= 1, `events repeated after the tab was hidden: ${kinds.join(", ")}`);
  await button("Roll back").click();
  await deploymentRow(3).waitFor();
  const row = await deploymentRow(3).innerText();
  check(/rollback/.test(row), `deployment #3 is not marked as a rollback: ${row}`);
  await waitDeployment(3, "healthy");
  await page.getByRole("log", { name: "Events of deployment #3" }).getByText(/deployment\.healthy/).waitFor({ timeout: 15_000 });
});

// The spec is edited with If-Match; a secret variable's value is never shown again.
await step("edit the spec: a secret variable is write-only, the PATCH carries If-Match", async () => {
  await page.goto(state.serviceUrl);
  await heading("Service web").waitFor();
  const patches = [];
  const onRequest = (r) => {
    if (r.method() === "PATCH") patches.push(r.headers()["if-match"] ?? "");
  };
  page.on("request", onRequest);
  try {
    await button("Edit spec").click();
    await button("Add variable").click();
    await page.getByLabel("Variable 1 name").fill("API_KEY");
    await page.getByLabel("Variable 1 value").fill(`s3cret-${stamp}`);
    await page.getByLabel("Variable 1 is secret").check();
    await button("Add variable").click();
    await page.getByLabel("Variable 2 name").fill("MODE");
    await page.getByLabel("Variable 2 value").fill("production");
    await button("Save spec").click();
    const vars = page.getByRole("region", { name: "Variables table", exact: true });
    await vars.getByRole("row").filter({ hasText: "API_KEY" }).filter({ hasText: "secret, set" }).waitFor();
    await vars.getByRole("row").filter({ hasText: "MODE" }).filter({ hasText: "production" }).waitFor();
    check(!(await page.content()).includes(`s3cret-${stamp}`), "the secret's value is in the page");
    // Saving again without retyping the secret keeps it.
    await button("Edit spec").click();
    check((await page.getByLabel("Variable 1 value").inputValue()) === "", "the secret's value was filled in the form");
    await button("Save spec").click();
    await button("Edit spec").waitFor();
    await vars.getByRole("row").filter({ hasText: "API_KEY" }).filter({ hasText: "secret, set" }).waitFor();
    check(patches.length === 2, `${patches.length} PATCH requests`);
    check(patches.every((h) => h !== ""), "a PATCH without If-Match");
    const token = await apiLogin(ADMIN);
    const svc = await api(token, "GET", `/v1/projects/${state.projectId}/services/${state.serviceId}`);
    const key = svc.body.variables.find((v) => v.name === "API_KEY");
    check(key && key.secret === true && key.value == null, `API_KEY through the API: ${JSON.stringify(key)}`);
  } finally {
    page.off("request", onRequest);
  }
});

// Beyond the brief's list: a domain shows its DNS challenge; an API token's secret is shown once.
await step("a domain added in the UI shows its DNS challenge", async () => {
  await page.goto(`${BASE}/#/projects/${state.projectId}`);
  await heading(`Project ${state.projectName}`).waitFor();
  const hostname = `web-${stamp}.demo.test`;
  await page.getByLabel("Hostname").fill(hostname);
  await button("Add domain").click();
  const row = page.getByRole("region", { name: "Domains", exact: true }).getByRole("row").filter({ has: page.getByRole("rowheader", { name: hostname }) });
  await row.waitFor();
  const text = await row.innerText();
  check(text.includes(`_bulkhead-challenge.${hostname}`) && /pending/.test(text), `the domain row lacks its challenge: ${text.replace(/\s+/g, " ")}`);
  check((await row.getByRole("button", { name: `Verify ${hostname}` }).count()) === 1, "no Verify button");
  // The project's caps, with what it holds: its one service of the default 100.
  const services = page
    .getByRole("region", { name: "Limits table" })
    .getByRole("row")
    .filter({ has: page.getByRole("rowheader", { name: /^services / }) });
  await services.waitFor();
  const held = (await services.innerText()).replace(/\s+/g, " ").trim();
  check(/^services \(services_per_project\) 1 100$/.test(held), `the services limit row says: ${held}`);
});

await step("an API token's secret is shown once, with a copy button; then revoked", async () => {
  await page.goto(`${BASE}/#/tokens`);
  await heading("API tokens").waitFor();
  const name = `ci-${stamp}`;
  await page.getByLabel("Token name").fill(name);
  await button("Create token").click();
  const secret = await page.getByLabel("Secret", { exact: true }).inputValue();
  check(secret.length > 16, "no secret shown");
  await button("Copy secret").click();
  const copied = await page.evaluate(() => navigator.clipboard.readText()).catch(() => secret);
  check(copied === secret, "the copy button copied something else");
  const r = await fetch(`${BASE}/v1/me`, { headers: { Authorization: `Bearer ${secret}` } });
  check(r.status === 200, `the new token answers ${r.status} on /v1/me`);
  await button("I have copied it").click();
  check((await page.getByLabel("Secret", { exact: true }).count()) === 0, "the secret is still shown");
  await page.reload();
  await heading("API tokens").waitFor();
  const body = await page.locator("main").innerText();
  check(!body.includes(secret), "the secret is shown again after a reload");
  await page.getByRole("button", { name: `Revoke token ${name}` }).click();
  await page.getByRole("region", { name: "Your tokens", exact: true }).getByRole("row").filter({ hasText: name }).filter({ hasText: "revoked" }).waitFor();
  const after = await fetch(`${BASE}/v1/me`, { headers: { Authorization: `Bearer ${secret}` } });
  check(after.status === 401, `the revoked token answers ${after.status} on /v1/me`);
});

// 5. The viewer: invited in the UI, accepts, sees no Deploy button; the API refuses it too.
await step("invite a viewer; the viewer accepts, sees no Deploy button, and the API answers 403", async () => {
  await page.goto(`${BASE}/#/projects/${state.projectId}`);
  await heading(`Project ${state.projectName}`).waitFor();
  await page.getByLabel("Invitee email").fill(VIEWER.email);
  await page.getByLabel("Invitee role").selectOption("viewer");
  await button("Invite").click();
  await page.getByRole("region", { name: "Invitations", exact: true }).getByRole("rowheader", { name: VIEWER.email }).waitFor();
  await shot(page, "project");
  await signOut();
  await signIn(VIEWER);
  await page.goto(`${BASE}/#/invitations`);
  await heading("My invitations").waitFor();
  await page.getByRole("button", { name: `Accept invitation as viewer to project ${state.projectName}`, exact: true }).click();
  await heading(`Project ${state.projectName}`).waitFor();
  await page.getByRole("link", { name: "web", exact: true }).click();
  await heading("Service web").waitFor();
  await page.getByText("Your role: viewer").waitFor();
  await page.getByRole("region", { name: "Deployments", exact: true }).waitFor();
  check((await button("Deploy").count()) === 0, "the viewer sees a Deploy button");
  check((await button("Roll back").count()) === 0, "the viewer sees a Roll back button");
  check((await button("Edit spec").count()) === 0, "the viewer sees an Edit spec button");
  const token = await apiLogin(VIEWER);
  const r = await api(token, "POST", `/v1/projects/${state.projectId}/services/${state.serviceId}/deployments`);
  check(r.status === 403, `POST deployments as the viewer answered ${r.status}, not 403`);
});

// 6. A refusal is explained: the Problem's detail in an alert.
await step("403 explained: the viewer sees the Problem's detail, and no provider actions", async () => {
  const token = await apiLogin(VIEWER);
  const expected = await api(token, "GET", "/v1/deploy-pipeline");
  check(expected.status === 403 && expected.body?.detail, `GET /v1/deploy-pipeline as the viewer answered ${expected.status}`);
  const nav = page.getByRole("navigation", { name: "Main" });
  check((await nav.getByRole("link", { name: "Deploy pipeline" }).count()) === 0, "the viewer's menu offers the deploy pipeline");
  await page.goto(`${BASE}/#/pipeline`);
  await heading("Deploy pipeline").waitFor();
  const alert = page.getByRole("alert").filter({ hasText: expected.body.detail });
  await alert.first().waitFor({ timeout: 10_000 });
  // The audit log of a project needs its admin role: asked for, the refusal is shown too.
  const audit = await api(token, "GET", `/v1/audit-events?project_id=${state.projectId}`);
  check(audit.status === 403, `GET /v1/audit-events?project_id as the viewer answered ${audit.status}`);
  await page.goto(`${BASE}/#/audit`);
  await heading("Audit log").waitFor();
  await page.getByLabel("Project", { exact: true }).selectOption({ label: state.projectName });
  await page.getByRole("alert").filter({ hasText: audit.body.detail }).first().waitFor({ timeout: 10_000 });
  await page.goto(`${BASE}/#/providers`);
  await heading("Providers").waitFor();
  await page.getByRole("region", { name: "All providers", exact: true }).getByRole("rowheader").first().waitFor();
  const drains = await page.getByRole("button", { name: /^(Drain|Undrain|Evacuate)\b/ }).count();
  check(drains === 0, `the viewer sees ${drains} provider action buttons`);
});

// 7. axe-core on the main pages (as the admin), and no sideways scroll at 390 px.
await step("axe: no serious or critical violation; no horizontal overflow at 390 px", async () => {
  await signOut();
  await signIn(ADMIN);
  const axeSource = await readFile(require.resolve("axe-core/axe.min.js"), "utf8");
  const pages = [
    ["projects", `${BASE}/#/projects`, "Projects"],
    ["project", `${BASE}/#/projects/${state.projectId}`, `Project ${state.projectName}`],
    ["service", state.serviceUrl, "Service web"],
    ["providers", `${BASE}/#/providers`, "Providers"],
    ["provider", `${BASE}/#/providers/${PROVIDERS[0]}`, `Provider ${PROVIDERS[0]}`],
    ["invitations", `${BASE}/#/invitations`, "My invitations"],
    ["routing", `${BASE}/#/routing`, "Routing"],
    ["pipeline", `${BASE}/#/pipeline`, "Deploy pipeline"],
    ["tokens", `${BASE}/#/tokens`, "API tokens"],
    ["audit", `${BASE}/#/audit`, "Audit log"],
    ["account", `${BASE}/#/account`, "Your account"],
    ["git", `${BASE}/#/projects/${state.projectId}/git`, "Git pushes"],
    ["webhooks", `${BASE}/#/projects/${state.projectId}/webhooks`, "Webhooks"],
  ];
  const problems = [];
  for (const [name, url, title] of pages) {
    await page.goto(url);
    await heading(title).waitFor();
    await page.waitForTimeout(1500); // let the lists load
    // Playwright evaluates through the DevTools protocol, which the page's CSP does not govern.
    await page.evaluate(axeSource);
    const violations = await page.evaluate(async () => {
      // eslint-disable-next-line no-undef
      const r = await axe.run(document, { resultTypes: ["violations"] });
      return r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 3).map((n) => n.target.join(" ")) }));
    });
    for (const v of violations) {
      const line = `${name}: ${v.impact} ${v.id} (${v.help}) at ${v.nodes.join(", ")}`;
      if (v.impact === "serious" || v.impact === "critical") problems.push(line);
      else console.log(`# axe ${line}`);
    }
    if (!["projects", "project", "service"].includes(name)) await shot(page, name);
  }
  // Keyboard: the first Tab reaches the skip link, and focus is visible.
  await page.goto(`${BASE}/#/projects`);
  await heading("Projects").waitFor();
  await page.locator("body").click({ position: { x: 5, y: 300 } });
  await page.evaluate(() => (document.activeElement instanceof HTMLElement ? document.activeElement.blur() : undefined));
  await page.keyboard.press("Tab");
  const focus = await page.evaluate(() => {
    const el = document.activeElement;
    const style = el ? getComputedStyle(el) : null;
    return { text: el?.textContent ?? "", outline: style ? `${style.outlineStyle} ${style.outlineWidth}` : "" };
  });
  if (focus.text !== "Skip to content") problems.push(`the first Tab focuses "${focus.text}", not the skip link`);
  if (/^none/.test(focus.outline) || / 0px$/.test(focus.outline)) problems.push(`no visible focus ring (${focus.outline})`);
  await page.keyboard.press("Tab");
  await page.keyboard.press("Tab");
  const ring = await page.evaluate(() => {
    const el = document.activeElement;
    return el ? `${el.tagName} ${getComputedStyle(el).outlineStyle}` : "";
  });
  if (/none$/.test(ring)) problems.push(`no visible focus ring on ${ring}`);
  // No inline style attribute anywhere (the CSP forbids them).
  const styled = await page.evaluate(() => document.querySelectorAll("[style]").length);
  if (styled > 0) problems.push(`${styled} elements carry a style attribute`);
  await page.setViewportSize({ width: 390, height: 844 });
  await page.goto(state.serviceUrl);
  await heading("Service web").waitFor();
  await page.getByRole("region", { name: "Instances", exact: true }).waitFor();
  await page.waitForTimeout(500);
  const width = await page.evaluate(() => document.documentElement.scrollWidth);
  if (width > 390) problems.push(`the service page is ${width} px wide at 390 px`);
  await shot(page, "service-390");
  // The menu collapses behind a button at this width, and opens.
  const menu = page.getByRole("button", { name: "Menu" });
  if (!(await menu.isVisible())) problems.push("no Menu button at 390 px");
  else {
    if (await page.getByRole("link", { name: "Providers" }).isVisible()) problems.push("the navigation is not collapsed at 390 px");
    await menu.click();
    if (!(await page.getByRole("link", { name: "Providers" }).isVisible())) problems.push("the Menu button does not open the navigation");
    if ((await menu.getAttribute("aria-expanded")) !== "true") problems.push("the Menu button does not say it is expanded");
  }
  await page.setViewportSize({ width: 1280, height: 900 });
  check(problems.length === 0, problems.join("; "));
});

// Beyond the brief's list: the administrator drains a provider and takes it back.
await step("admin drains and undrains a provider from the providers page", async () => {
  const name = PROVIDERS[PROVIDERS.length - 1];
  await page.goto(`${BASE}/#/providers`);
  await heading("Providers").waitFor();
  const row = page.getByRole("region", { name: "All providers", exact: true }).getByRole("row").filter({ has: page.getByRole("rowheader", { name, exact: true }) });
  await row.getByRole("button", { name: `Drain ${name}` }).click();
  await row.getByRole("button", { name: `Undrain ${name}` }).waitFor();
  await row.getByRole("cell", { name: "drained", exact: true }).first().waitFor();
  await row.getByRole("button", { name: `Undrain ${name}` }).click();
  await row.getByRole("button", { name: `Drain ${name}` }).waitFor();
  const token = await apiLogin(ADMIN);
  const p = await api(token, "GET", `/v1/providers/${name}`);
  check(p.body.drained === false, `${name} is still drained: ${JSON.stringify(p.body).slice(0, 200)}`);
});

await step("the audit log shows the newest events first, filtered by the server", async () => {
  await page.goto(`${BASE}/#/audit`);
  await heading("Audit log").waitFor();
  // The drain just made is newer than the deployments made before it: it comes first.
  const events = page.getByRole("region", { name: "Audit events table" });
  await events.getByText("provider.update", { exact: true }).first().waitFor({ timeout: 10_000 });
  const actions = await events.locator("tbody tr td:first-of-type code").allTextContents();
  const drain = actions.indexOf("provider.update");
  const deploy = actions.indexOf("deployment.create");
  check(drain >= 0 && (deploy < 0 || drain < deploy), `not newest first: ${actions.slice(0, 12).join(", ")}`);
  await page.getByLabel("Action").fill("deployment.create");
  await page.waitForFunction(() => {
    const rows = [...document.querySelectorAll('[aria-label="Audit events table"] tbody tr')];
    return rows.length > 0 && rows.every((r) => r.querySelector("td code")?.textContent === "deployment.create");
  }, null, { timeout: 10_000 });
  const rows = await events.locator("tbody tr").count();
  check(rows >= 2, `${rows} deployment.create event(s) shown, the test made at least 2`);
});

// Beyond the brief's list: with the pipeline paused a deployment waits, and is cancelled.
await step("pause the pipeline, cancel a waiting deployment, resume (in a project of its own)", async () => {
  const token = await apiLogin(ADMIN);
  const project = await api(token, "POST", "/v1/projects", { name: `dash-cancel-${stamp}` });
  check(project.status === 201, `POST /v1/projects answered ${project.status}`);
  const pid = project.body.id;
  const env = await api(token, "POST", `/v1/projects/${pid}/environments`, { name: "staging" });
  const svc = await api(token, "POST", `/v1/projects/${pid}/services`, {
    environment_id: env.body.id,
    name: "idle",
    port: 8080,
    replicas: 1,
    source: { type: "command", command: ["python3", "-m", "http.server", "$PORT", "--bind", "127.0.0.1"] },
    placement: { providers: [{ name: PROVIDERS[PROVIDERS.length - 1] }] },
  });
  check(svc.status === 201, `POST services answered ${svc.status}: ${JSON.stringify(svc.body)}`);
  try {
    await page.goto(`${BASE}/#/pipeline`);
    await heading("Deploy pipeline").waitFor();
    await page.getByLabel("Reason for pausing").fill("dashboard browser test");
    await button("Pause pipeline").click();
    await button("Resume pipeline").waitFor();
    await page.getByRole("region", { name: "Status", exact: true }).getByText("paused").first().waitFor();
    await page.goto(`${BASE}/#/projects/${pid}/services/${svc.body.id}`);
    await heading("Service idle").waitFor();
    await button("Deploy").click();
    await deploymentRow(1).waitFor();
    await button("Cancel deployment").click();
    await waitDeployment(1, "cancelled", 30_000);
    check((await button("Cancel deployment").count()) === 0, "Cancel deployment is still offered");
    await page.goto(`${BASE}/#/pipeline`);
    await button("Resume pipeline").click();
    await button("Pause pipeline").waitFor();
  } finally {
    await api(token, "POST", "/v1/deploy-pipeline/resume");
  }
  const pipeline = await api(token, "GET", "/v1/deploy-pipeline");
  check(pipeline.body.paused === false, "the pipeline is still paused");
  state.idle = { projectId: pid, serviceId: svc.body.id };
});

// Git pushes: an installation made on its page, its secret shown once; a push signed with it
// (as GitHub signs one) is in its delivery log. The push's branch is bound to nothing, so that
// it deploys nothing here.
await step("a git installation made in the UI takes a signed push, shown in its delivery log", async () => {
  await page.goto(`${BASE}/#/projects/${state.projectId}`);
  await page.getByRole("link", { name: "Git pushes", exact: true }).click();
  await heading("Git pushes").waitFor();
  await button("Add a binding").click();
  await page.getByLabel("Repository 1").fill("acme/storefront");
  await button("Add installation").click();
  const secret = await page.locator("#git-secret-value").inputValue();
  const url = await page.locator("#git-url").inputValue();
  check(secret.length >= 20 && url.startsWith(`${BASE}/v1/hooks/github`), `secret ${secret.length} characters, payload URL ${url}`);
  await button("I have set it").click();
  check((await page.locator("#git-secret-value").count()) === 0, "the secret is still shown");
  const commit = "c0ffee".repeat(7).slice(0, 40);
  const body = JSON.stringify({
    ref: "refs/heads/feature",
    before: "0".repeat(40),
    after: commit,
    created: false,
    deleted: false,
    forced: false,
    repository: { id: 1296269, full_name: "acme/storefront", pushed_at: Math.floor(Date.now() / 1000), private: true },
    pusher: { name: "octocat", email: "octocat@example.com" },
    head_commit: { id: commit, message: "Ship it", timestamp: new Date().toISOString() },
    commits: [],
  });
  const signature = `sha256=${crypto.createHmac("sha256", secret).update(body).digest("hex")}`;
  const pushed = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-GitHub-Event": "push", "X-GitHub-Delivery": `d-${stamp}`, "X-Hub-Signature-256": signature },
    body,
  });
  check(pushed.status < 300, `the push answered ${pushed.status}: ${await pushed.text()}`);
  await button("Details").click();
  const row = page.getByRole("region", { name: "Deliveries table", exact: true }).getByRole("row").filter({ hasText: "acme/storefront" });
  await row.waitFor();
  const text = (await row.innerText()).replace(/\s+/g, " ");
  check(text.includes("feature") && text.includes("ignored"), `the delivery row says ${text}`);
  await shot(page, "git");
});

// Webhooks: an endpoint made on its page (a receiver of this test's own), its secret shown once;
// a deployment's messages reach it and are listed; one is replayed.
await step("a webhook endpoint made in the UI gets a deployment's messages; one is replayed", async () => {
  const received = [];
  const receiver = http.createServer((req, res) => {
    let text = "";
    req.on("data", (chunk) => (text += chunk));
    req.on("end", () => {
      received.push({ id: req.headers["webhook-id"], signature: req.headers["webhook-signature"], body: text });
      res.writeHead(204).end();
    });
  });
  await new Promise((resolve) => receiver.listen(0, "127.0.0.1", resolve));
  try {
    const { projectId, serviceId } = state.idle;
    await page.goto(`${BASE}/#/projects/${projectId}/webhooks`);
    await heading("Webhooks").waitFor();
    await page.getByLabel("Endpoint URL").fill(`http://127.0.0.1:${receiver.address().port}/hook`);
    await page.getByLabel("deployment.queued").check();
    await button("Add endpoint").click();
    const secret = await page.locator("#webhook-secret-value").inputValue();
    check(secret.startsWith("whsec_"), `the secret is ${secret.slice(0, 6)}…`);
    await button("I have copied it").click();
    const token = await apiLogin(ADMIN);
    const deployed = await api(token, "POST", `/v1/projects/${projectId}/services/${serviceId}/deployments`, {});
    check(deployed.status === 201 || deployed.status === 202, `the deploy answered ${deployed.status}`);
    await button("Messages").click();
    const table = page.getByRole("region", { name: "Messages table", exact: true });
    await table.getByRole("row").filter({ hasText: "delivered" }).first().waitFor({ timeout: 30_000 });
    check(received.length === 1 && received[0].signature?.startsWith("v1,"), `the receiver got ${received.length} messages`);
    await table.getByRole("button", { name: "Replay" }).first().click();
    const t0 = Date.now();
    while (received.length < 2) {
      if (Date.now() - t0 > 15_000) throw new Error("the replayed message did not arrive");
      await page.waitForTimeout(100);
    }
    check(received[1].id === received[0].id, "the replay has another webhook-id");
    await shot(page, "webhooks");
  } finally {
    receiver.close();
  }
});

// 8. A suspended gcp account shows on the providers page; the other providers keep serving.
if (FAULTS) {
  await step("gcp suspended: the providers page says so within 5 s; the other instances stay healthy", async () => {
    await page.goto(`${BASE}/#/providers`);
    await heading("Providers").waitFor();
    const put = await fetch(FAULTS, { method: "PUT", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ suspended: true }) });
    check(put.ok, `PUT ${FAULTS} answered ${put.status}`);
    try {
      const row = page.getByRole("region", { name: "All providers", exact: true }).getByRole("row").filter({ has: page.getByRole("rowheader", { name: "gcp", exact: true }) });
      const t0 = Date.now();
      let text = "";
      for (;;) {
        text = (await row.innerText()).replace(/\s+/g, " ");
        const why = (await row.getByRole("cell").nth(2).innerText().catch(() => "")).trim();
        if (/unavailable/.test(text) && why !== "" && why !== "—") break;
        if (Date.now() - t0 > 5_000) throw new Error(`after 5 s the gcp row says: ${text}`);
        await page.waitForTimeout(200);
      }
      console.log(`# gcp unavailable after ${Date.now() - t0} ms: ${text}`);
      await shot(page, "providers-gcp-suspended");
      await page.goto(state.serviceUrl);
      await heading("Service web").waitFor();
      const instances = page.getByRole("region", { name: "Instances", exact: true });
      for (const p of PROVIDERS.filter((p) => p !== "gcp")) {
        await instances.getByRole("row").filter({ has: page.getByRole("cell", { name: p, exact: true }) }).filter({ has: page.getByRole("cell", { name: "healthy", exact: true }) }).first().waitFor({ timeout: 10_000 });
      }
    } finally {
      await fetch(FAULTS, { method: "PUT", headers: { "Content-Type": "application/json" }, body: "{}" }).catch(() => undefined);
    }
  });
  await step("gcp fault cleared: the provider recovers", async () => {
    const token = await apiLogin(ADMIN);
    const t0 = Date.now();
    let last;
    for (;;) {
      last = await api(token, "GET", "/v1/providers/gcp");
      if (last.status === 200 && last.body.state !== "unavailable") break;
      if (Date.now() - t0 > 60_000) throw new Error(`gcp still ${last.body?.state} 60 s after the fault was cleared: ${last.body?.health_reason}`);
      await new Promise((r) => setTimeout(r, 500));
    }
    console.log(`# gcp ${last.body.state} ${Date.now() - t0} ms after the fault was cleared`);
    const row = page.getByRole("region", { name: "All providers", exact: true }).getByRole("row").filter({ has: page.getByRole("rowheader", { name: "gcp", exact: true }) });
    await page.goto(`${BASE}/#/providers`);
    await row.waitFor();
    const t1 = Date.now();
    while (/unavailable/.test(await row.innerText())) {
      if (Date.now() - t1 > 5_000) throw new Error("the providers page still shows gcp unavailable");
      await page.waitForTimeout(200);
    }
  });
} else {
  console.log("# GCP_FAULTS_URL unset: the gcp suspension step is skipped");
}

// 8b. An outside account: linked from the account page through the provider's own page, then
// signing in with the sign-in page's button (the provider remembers the browser).
if (OIDC) {
  await step(`link an account at ${OIDC}, then sign in with the button of the sign-in page`, async () => {
    await page.goto(`${BASE}/#/account`);
    await heading("Your account").waitFor();
    await button(`Link an account at ${OIDC}`).click();
    await page.waitForURL(/\/interaction\//);
    await page.getByLabel("Account", { exact: true }).fill(OIDC_ACCOUNT);
    await page.getByRole("button", { name: "Continue" }).click();
    await heading("Your account").waitFor();
    const row = page.getByRole("region", { name: "Linked accounts", exact: true }).getByRole("row").filter({ has: page.getByRole("rowheader", { name: OIDC, exact: true }) });
    await row.waitFor();
    const text = await row.innerText();
    check(text.includes(`${OIDC_ACCOUNT}@example.com`), `the linked row says ${text.replace(/\s+/g, " ")}`);
    check(new URL(page.url()).search === "", `the provider's answer stays in the address bar: ${page.url()}`);
    await shot(page, "account");
    await signOut();
    await button(`Sign in with ${OIDC}`).click();
    await heading("Projects").waitFor();
    check(new URL(page.url()).pathname === "/" && new URL(page.url()).search === "", `signed in at ${page.url()}`);
    const who = await page.locator(".who").innerText();
    check(who.includes(ADMIN.email), `signed in as ${who}`);
    const storage = await page.evaluate(() => JSON.stringify([{ ...localStorage }, { ...sessionStorage }]));
    check(storage === "[{},{}]", `Web Storage is not empty: ${storage.slice(0, 200)}`);
    // The callback page again (a reload, or its address shared): refused, nothing finished twice.
    await signOut();
    await page.goto(`${BASE}/sign-in/callback?code=used&state=not-this-tabs`);
    await page.getByRole("alert").filter({ hasText: "not started in this tab" }).waitFor();
  });
} else {
  console.log("# OIDC_PROVIDER unset: the outside sign-in step is skipped");
}

// 9. The size of the script.
await step("app.js size", async () => {
  const js = await readFile(path.join(root, "dist/app.js"));
  const css = await readFile(path.join(root, "dist/app.css"));
  const gz = zlib.gzipSync(js, { level: 9 }).length;
  console.log(`APP_JS_GZIP_BYTES=${gz}`);
  console.log(`APP_CSS_GZIP_BYTES=${zlib.gzipSync(css, { level: 9 }).length}`);
  check(gz < 200 * 1024, `app.js is ${gz} bytes gzipped`);
});

await browser.close();
finish();
