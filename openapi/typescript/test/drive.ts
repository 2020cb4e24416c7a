/**
 * Drives a running Bulkhead with the generated client, as a dashboard would: logs in, creates a
 * project, an environment, a service and a deployment, follows the deployment's event stream
 * until it is healthy, then reads the deployment and its instances and checks them; and checks
 * that refused requests answer typed problems.
 *
 * Environment: `BULKHEAD_URL`, `BULKHEAD_EMAIL`, `BULKHEAD_PASSWORD` (a user who may create
 * projects); optional `BULKHEAD_PROJECT_NAME` (default `drive-<time>`),
 * `BULKHEAD_PROVIDERS` (comma-separated, default `gcp,aws,metal`: those of `bulkhead dev`) and
 * `BULKHEAD_TIMEOUT_SECS` (how long the deployment may take to become healthy, default 90).
 *
 * Its last line of output is `drive: done {"project_id":…,"service_id":…,"deployment_id":…}`.
 * Any failure exits with status 1 and says what failed.
 */

import {
  createBulkheadClient,
  deploymentEvents,
  FINISHED_DEPLOYMENT_STATES,
  serviceLogs,
  type BulkheadClient,
  type DeployedInstanceView,
  type DeploymentEventKind,
  type DeploymentEventView,
  type DeploymentState,
  type DeploymentView,
  type ErrorCode,
  type Problem,
  type ServiceCreate,
} from "../src/index.js";

/** A workload that answers `GET /` with its `SECRET_TOKEN` (on `metal`: a process of its own). */
const WORKLOAD = [
  "import os,http.server as h",
  "class H(h.BaseHTTPRequestHandler):",
  " def do_GET(s):",
  "  s.send_response(200); s.end_headers(); s.wfile.write(os.environ.get('SECRET_TOKEN','-').encode())",
  " def log_message(s,*a): pass",
  "h.HTTPServer(('127.0.0.1',int(os.environ['PORT'])),H).serve_forever()",
].join("\n");
const SECRET = "tok-drive-5e1b07";

class DriveFailure extends Error {}

function fail(message: string): never {
  throw new DriveFailure(message);
}

function check(condition: boolean, message: string): asserts condition {
  if (!condition) {
    fail(message);
  }
}

function env(name: string, fallback?: string): string {
  const value = process.env[name] ?? fallback;
  if (value === undefined || value === "") {
    fail(`set ${name}`);
  }
  return value;
}

function log(message: string): void {
  console.log(`drive: ${message}`);
}

/**
 * The answer of a request that must succeed: its data, or a failure naming the request and
 * the problem the API answered.
 */
function ok<T>(what: string, result: { data?: T; error?: unknown; response: Response }): T {
  const { data, error, response } = result;
  if (error !== undefined || data === undefined) {
    fail(`${what}: ${response.status} ${JSON.stringify(error ?? "(no body)")}`);
  }
  return data;
}

/**
 * Checks that a refused request answered `status` with a problem+json body whose `code` is
 * `code` (an `ErrorCode`: a code the API does not document does not compile).
 */
function expectProblem(
  what: string,
  result: { error?: Problem; response: Response },
  status: number,
  code: ErrorCode,
): Problem {
  const { error, response } = result;
  check(response.status === status, `${what}: answered ${response.status}, not ${status}`);
  check(error !== undefined, `${what}: no problem in the answer`);
  check(
    response.headers.get("content-type") === "application/problem+json",
    `${what}: content type ${response.headers.get("content-type")}, not application/problem+json`,
  );
  check(error.code === code, `${what}: code ${error.code}, not ${code}`);
  check(error.status === status, `${what}: the problem says status ${error.status}`);
  check(error.detail !== "", `${what}: the problem has no detail`);
  check(
    error.request_id === response.headers.get("x-request-id"),
    `${what}: request_id ${error.request_id} is not the x-request-id header`,
  );
  return error;
}

// Compile-time checks against the schema: a problem's `code` is a closed set (were it a plain
// string, the `@ts-expect-error` below would fail the build), and the codes this program
// expects are in it.
// @ts-expect-error: not a code the API documents.
const notACode: Problem["code"] = "no_such_code";
void notACode;
const expectedCodes = ["invalid_request", "unauthenticated"] as const satisfies readonly ErrorCode[];
void expectedCodes;

async function problems(anonymous: BulkheadClient, api: BulkheadClient): Promise<void> {
  expectProblem(
    "listing projects without a token",
    await anonymous.GET("/v1/projects"),
    401,
    "unauthenticated",
  );
  const invalid = expectProblem(
    "creating a project with an empty name",
    await api.POST("/v1/projects", { body: { name: "" } }),
    422,
    "invalid_request",
  );
  // Matching on codes is exhaustive-checkable: a switch over `ErrorCode` narrows.
  switch (invalid.code) {
    case "invalid_request":
      break;
    default:
      fail(`unexpected code ${invalid.code}`);
  }
  log(`problems are typed: 401 unauthenticated, 422 ${invalid.code} (${invalid.detail})`);
}

async function follow(
  api: BulkheadClient,
  deployment: DeploymentView,
  timeoutMs: number,
): Promise<DeploymentEventView[]> {
  const stop = new AbortController();
  const timer = setTimeout(() => stop.abort(), timeoutMs);
  const seen: DeploymentEventView[] = [];
  try {
    const ref = {
      project_id: deployment.project_id,
      service_id: deployment.service_id,
      deployment_id: deployment.id,
    };
    for await (const event of deploymentEvents(api, ref, { signal: stop.signal })) {
      log(`event ${event.seq} ${event.kind}: ${event.message}`);
      check(
        event.seq === seen.length + 1,
        `event ${event.seq} after ${seen.length} events: an event missed or repeated`,
      );
      check(!JSON.stringify(event).includes(SECRET), `a secret in event ${event.seq}`);
      seen.push(event);
      if (event.kind === "deployment.healthy") {
        return seen; // Leaving the loop closes the stream.
      }
      const ended = FINISHED_DEPLOYMENT_STATES.find((state) => event.kind === `deployment.${state}`);
      if (ended !== undefined) {
        fail(`the deployment ended ${ended}: ${event.message}`);
      }
    }
  } catch (err) {
    if (!stop.signal.aborted) {
      throw err;
    }
  } finally {
    clearTimeout(timer);
  }
  if (stop.signal.aborted) {
    fail(`the deployment was not healthy within ${timeoutMs / 1000} s; events: ${seen.map((e) => e.kind).join(", ")}`);
  }
  fail(`the event stream ended before the deployment was healthy; events: ${seen.map((e) => e.kind).join(", ")}`);
}

async function answer(instance: DeployedInstanceView): Promise<string> {
  check(instance.address != null, `instance ${instance.instance_key} has no address`);
  const response = await fetch(`http://${instance.address}/`, { signal: AbortSignal.timeout(10_000) });
  check(response.ok, `instance ${instance.instance_key} at ${instance.address} answered ${response.status}`);
  return response.text();
}

async function main(): Promise<void> {
  const baseUrl = env("BULKHEAD_URL");
  const email = env("BULKHEAD_EMAIL");
  const password = env("BULKHEAD_PASSWORD");
  const projectName = env("BULKHEAD_PROJECT_NAME", `drive-${Date.now()}`);
  const providers = env("BULKHEAD_PROVIDERS", "gcp,aws,metal").split(",").filter((p) => p !== "");
  const timeoutSecs = Number(env("BULKHEAD_TIMEOUT_SECS", "90"));
  check(Number.isFinite(timeoutSecs) && timeoutSecs > 0, "BULKHEAD_TIMEOUT_SECS is a number of seconds");

  const anonymous = createBulkheadClient(baseUrl);
  const session = ok(
    "logging in",
    await anonymous.POST("/v1/auth/login", { body: { email, password } }),
  );
  check(session.token_type === "Bearer", `token_type ${session.token_type}`);
  log(`logged in as ${email} (the access token expires in ${session.expires_in} s)`);
  const api = createBulkheadClient(baseUrl, session.access_token);
  const me = ok("reading /v1/me", await api.GET("/v1/me"));
  check(me.email === email, `/v1/me is ${me.email}, not ${email}`);

  await problems(anonymous, api);

  const project = ok(
    "creating a project",
    await api.POST("/v1/projects", { body: { name: projectName, description: "made by drive.ts" } }),
  );
  check(project.name === projectName, `the project is named ${project.name}`);
  log(`project ${project.id} (${project.name})`);
  const project_id = project.id;
  const environment = ok(
    "creating an environment",
    await api.POST("/v1/projects/{project_id}/environments", {
      params: { path: { project_id } },
      body: { name: "production" },
    }),
  );
  const spec: ServiceCreate = {
    environment_id: environment.id,
    name: "web",
    source: { type: "command", command: ["python3", "-c", WORKLOAD] },
    port: 8080,
    replicas: providers.length,
    variables: [{ name: "SECRET_TOKEN", value: SECRET, secret: true }],
    placement: { providers: providers.map((name) => ({ name })) },
    health_check: { path: "/", interval_ms: 200, timeout_ms: 1000, start_timeout_secs: 30 },
  };
  const service = ok(
    "creating a service",
    await api.POST("/v1/projects/{project_id}/services", { params: { path: { project_id } }, body: spec }),
  );
  const variable = service.variables.find((v) => v.name === "SECRET_TOKEN");
  check(variable?.secret === true && variable.value == null, "the secret variable's value is returned");
  const service_id = service.id;
  log(`service ${service_id} (${service.replicas} replicas on ${providers.join(", ")})`);

  const made = ok(
    "creating a deployment",
    await api.POST("/v1/projects/{project_id}/services/{service_id}/deployments", {
      params: { path: { project_id, service_id } },
    }),
  );
  check(made.state === ("queued" satisfies DeploymentState), `a new deployment is ${made.state}`);
  check(made.number === 1, `the first deployment is number ${made.number}`);
  const deployment_id = made.id;
  log(`deployment ${deployment_id}, following its events`);

  const events = await follow(api, made, timeoutSecs * 1000);
  const kinds = new Set(events.map((event) => event.kind));
  const wanted: DeploymentEventKind[] = ["deployment.queued", "instance.placed", "instance.started", "instance.healthy"];
  for (const kind of wanted) {
    check(kinds.has(kind), `no ${kind} event among ${[...kinds].join(", ")}`);
  }

  const deployment = ok(
    "reading the deployment",
    await api.GET("/v1/projects/{project_id}/services/{service_id}/deployments/{deployment_id}", {
      params: { path: { project_id, service_id, deployment_id } },
    }),
  );
  check(deployment.state === ("healthy" satisfies DeploymentState), `the deployment is ${deployment.state}`);
  check(deployment.healthy_at != null, "the deployment has no healthy_at");
  check(!JSON.stringify(deployment).includes(SECRET), "a secret in the deployment");
  const instances = deployment.instances ?? fail("the deployment has no instances");
  check(instances.length === providers.length, `${instances.length} instances, not ${providers.length}`);
  const on = new Set(instances.map((instance) => instance.provider));
  check(
    on.size === providers.length && providers.every((p) => on.has(p)),
    `instances on ${[...on].join(", ")}, not ${providers.join(", ")}`,
  );
  for (const instance of instances) {
    check(
      instance.state === "running" && instance.health === "healthy",
      `instance ${instance.instance_key} on ${instance.provider} is ${instance.state}/${instance.health}`,
    );
    const body = await answer(instance);
    if (instance.provider === "metal") {
      check(body === SECRET, `the metal instance answered ${JSON.stringify(body)}, not its secret`);
    }
    log(`instance ${instance.instance_key} on ${instance.provider} (${instance.region}) answers at ${instance.address}`);
  }

  // The service's logs, followed from before the deployment: the simulated clouds' instances
  // printed the requests just made (the metal workload prints nothing), and no secret shows.
  const clouds = instances.filter((i) => i.provider !== "metal").map((i) => i.instance_key);
  const printedBy = new Set<string>();
  const logStop = new AbortController();
  const logTimer = setTimeout(() => logStop.abort(), 30_000);
  try {
    const since = new Date(Date.now() - 600_000).toISOString();
    for await (const page of serviceLogs(api, { project_id, service_id }, { since, signal: logStop.signal })) {
      check(!JSON.stringify(page).includes(SECRET), "a secret in the logs");
      check(page.missing.length === 0, `instances missing from the logs: ${JSON.stringify(page.missing)}`);
      for (const line of page.lines) {
        if (line.text.startsWith("GET / ")) printedBy.add(line.instance_key);
      }
      if (clouds.every((key) => printedBy.has(key))) break;
    }
  } catch (err) {
    if (!logStop.signal.aborted) throw err;
  } finally {
    clearTimeout(logTimer);
  }
  check(clouds.every((key) => printedBy.has(key)), `no request line in the logs of ${clouds.filter((k) => !printedBy.has(k)).join(", ")}`);
  log(`logs followed: the requests' lines of ${[...printedBy].join(", ")}`);

  const listed = ok(
    "listing the service's instances",
    await api.GET("/v1/projects/{project_id}/services/{service_id}/instances", {
      params: { path: { project_id, service_id }, query: { limit: 50 } },
    }),
  );
  check(listed.items.length === providers.length, `the service lists ${listed.items.length} instances`);
  check(
    listed.items.every((i) => i.deployment_id === deployment_id && i.state === "running"),
    "the service's instances are not all running instances of the deployment",
  );
  const deployments = ok(
    "listing the deployments",
    await api.GET("/v1/projects/{project_id}/services/{service_id}/deployments", {
      params: { path: { project_id, service_id } },
    }),
  );
  check(
    deployments.items.length === 1 && deployments.items[0]?.state === "healthy",
    `the deployment list: ${JSON.stringify(deployments.items.map((d) => d.state))}`,
  );

  log(`done ${JSON.stringify({ project_id, service_id, deployment_id })}`);
}

main().catch((err: unknown) => {
  const message = err instanceof DriveFailure ? err.message : err instanceof Error ? (err.stack ?? err.message) : String(err);
  console.error(`drive: FAILED: ${message}`);
  process.exitCode = 1;
});
