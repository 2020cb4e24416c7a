/**
 * `@bulkhead/client`: a typed client of the Bulkhead API for the dashboard.
 *
 * Every request and response type comes from `schema.d.ts`, which `npm run generate` makes from
 * the committed OpenAPI document (`openapi/openapi.json`); the integration test
 * `clients_typescript` fails when it is stale, so this code and its callers are type-checked
 * against the API as it is.
 *
 * ```ts
 * const anonymous = createBulkheadClient("https://api.example.com");
 * const { data: session } = await anonymous.POST("/v1/auth/login", { body: { email, password } });
 * const api = createBulkheadClient("https://api.example.com", session!.access_token);
 * const { data, error } = await api.POST("/v1/projects", { body: { name: "shop" } });
 * if (error) console.error(error.code, error.detail); // a Problem: `code` is an ErrorCode
 * for await (const event of deploymentEvents(api, { project_id, service_id, deployment_id })) {
 *   console.log(event.seq, event.kind, event.message);
 * }
 * ```
 */

import createClient, { type Client, type Middleware } from "openapi-fetch";

import type { components, paths } from "./schema.js";

export type { components, operations, paths } from "./schema.js";

type Schemas = components["schemas"];

// The schemas a dashboard works with. (Lists answer `Page_*` schemas: `{ items, next_cursor }`.)

/** The body of every error response (`application/problem+json`). */
export type Problem = Schemas["Problem"];
/** Every `code` a problem can carry. */
export type ErrorCode = Schemas["ErrorCode"];
export type LoginRequest = Schemas["LoginRequest"];
export type SessionTokens = Schemas["SessionTokens"];
export type UserView = Schemas["UserView"];
export type MeUpdate = Schemas["MeUpdate"];
export type TokenCreate = Schemas["TokenCreate"];
export type TokenCreated = Schemas["TokenCreated"];
export type TokenView = Schemas["TokenView"];
export type Scope = Schemas["Scope"];
export type ProjectCreate = Schemas["ProjectCreate"];
export type ProjectUpdate = Schemas["ProjectUpdate"];
export type ProjectView = Schemas["ProjectView"];
export type ProjectRole = Schemas["ProjectRole"];
export type MemberView = Schemas["MemberView"];
export type MemberUpdate = Schemas["MemberUpdate"];
export type InvitationCreate = Schemas["InvitationCreate"];
export type InvitationView = Schemas["InvitationView"];
export type EnvironmentWrite = Schemas["EnvironmentWrite"];
export type EnvironmentView = Schemas["EnvironmentView"];
export type ServiceCreate = Schemas["ServiceCreate"];
export type ServiceUpdate = Schemas["ServiceUpdate"];
export type ServiceView = Schemas["ServiceView"];
export type ServiceSource = Schemas["ServiceSource"];
export type ServiceSpecView = Schemas["ServiceSpecView"];
export type VariableInput = Schemas["VariableInput"];
export type VariableView = Schemas["VariableView"];
export type PlacementPolicy = Schemas["PlacementPolicy"];
export type ProviderPreference = Schemas["ProviderPreference"];
export type HealthCheckSpec = Schemas["HealthCheckSpec"];
export type DeploymentView = Schemas["DeploymentView"];
export type DeployedInstanceView = Schemas["DeployedInstanceView"];
export type DeploymentEventView = Schemas["DeploymentEventView"];
export type EventPage = Schemas["EventPage"];
export type DomainCreate = Schemas["DomainCreate"];
export type DomainUpdate = Schemas["DomainUpdate"];
export type DomainView = Schemas["DomainView"];
export type TermsStatus = Schemas["TermsStatus"];
export type TermsView = Schemas["TermsView"];
export type TermsAccept = Schemas["TermsAccept"];
export type TermsAcceptanceView = Schemas["TermsAcceptanceView"];
export type AuditEventView = Schemas["AuditEventView"];
export type ProviderView = Schemas["ProviderView"];
export type ProviderHealth = Schemas["ProviderHealth"];

export type DeploymentState = Schemas["DeploymentState"];
export type DeploymentEventKind = Schemas["DeploymentEventKind"];
export type DeploymentStreamEvent = Schemas["DeploymentStreamEvent"];
export type LogPageView = Schemas["LogPageView"];
export type LogLineView = Schemas["LogLineView"];
export type LogsMissing = Schemas["LogsMissing"];
export type LogStreamEvent = Schemas["LogStreamEvent"];
export type DeployedInstanceState = Schemas["DeployedInstanceState"];
export type DeployedInstanceHealth = Schemas["DeployedInstanceHealth"];
export type ProviderState = Schemas["ProviderState"];
export type ListOrder = Schemas["ListOrder"];
/** The states after which a deployment changes no more. */
export const FINISHED_DEPLOYMENT_STATES: readonly DeploymentState[] = [
  "healthy",
  "failed",
  "cancelled",
  "superseded",
];

/** The client: `GET`, `POST`, `PATCH`, `DELETE`, … on the paths of the API, fully typed. */
export type BulkheadClient = Client<paths>;

/** A bearer token, or a function that gives the current one (e.g. refreshed by a session). */
export type TokenSource = string | (() => string | undefined | Promise<string | undefined>);

/**
 * A client of the API at `baseUrl` (e.g. `https://api.example.com`, no `/v1`), sending
 * `Authorization: Bearer <token>` on every request when a token is given: an access token from
 * `POST /v1/auth/login` or an API token.
 */
export function createBulkheadClient(baseUrl: string, token?: TokenSource): BulkheadClient {
  const client = createClient<paths>({ baseUrl });
  if (token !== undefined) {
    client.use(bearerAuth(token));
  }
  return client;
}

/** The middleware that sets `Authorization: Bearer`, for clients made otherwise. */
export function bearerAuth(token: TokenSource): Middleware {
  return {
    async onRequest({ request }) {
      const value = typeof token === "function" ? await token() : token;
      if (value) {
        request.headers.set("Authorization", `Bearer ${value}`);
      }
      return request;
    },
  };
}

/** Whether `value` has the shape of a problem document. */
export function isProblem(value: unknown): value is Problem {
  if (typeof value !== "object" || value === null) {
    return false;
  }
  const body = value as Record<string, unknown>;
  return (
    typeof body["code"] === "string" &&
    typeof body["status"] === "number" &&
    typeof body["detail"] === "string"
  );
}

/** An error answer of the API, as an exception (the SSE helper throws it). */
export class ProblemError extends Error {
  readonly problem: Problem;
  readonly status: number;

  constructor(problem: Problem, status: number) {
    super(`${status} ${problem.code}: ${problem.detail}`);
    this.name = "ProblemError";
    this.problem = problem;
    this.status = status;
  }
}

/** The path of a deployment's events (a page of JSON, or Server-Sent Events). */
export const DEPLOYMENT_EVENTS_PATH =
  "/v1/projects/{project_id}/services/{service_id}/deployments/{deployment_id}/events" satisfies keyof paths;
type DeploymentEventsOperation = paths[typeof DEPLOYMENT_EVENTS_PATH]["get"];
// Fails to compile unless the document says this operation answers an event stream.
export type _DeploymentEventsStreamDeclared =
  DeploymentEventsOperation["responses"][200]["content"]["text/event-stream"];

/** Which deployment's events: `project_id`, `service_id`, `deployment_id`. */
export type DeploymentRef = DeploymentEventsOperation["parameters"]["path"];

export interface EventStreamOptions {
  /**
   * Resume after the event with this `seq`. (Sent as the `after` query parameter, which the
   * server takes like `Last-Event-ID`: that header is not among those its CORS allows.)
   */
  after?: number;
  /** Ends the stream (the generator returns). */
  signal?: AbortSignal;
}

/**
 * Follows a deployment's events as Server-Sent Events (`Accept: text/event-stream`), through
 * `client` (its base URL and authentication): first those already written (after
 * `options.after`), then new ones as they happen. The generator returns when the server ends
 * the stream (the deployment has finished and its removals are done) or `options.signal` is
 * aborted; breaking out of a `for await` loop closes the connection. A dropped connection ends
 * it too: resume with `after` = the `seq` of the last event seen. Throws a `ProblemError` when
 * the API refuses.
 */
export async function* deploymentEvents(
  client: BulkheadClient,
  deployment: DeploymentRef,
  options: EventStreamOptions = {},
): AsyncGenerator<DeploymentEventView, void, undefined> {
  const { signal } = options;
  const query = options.after === undefined ? {} : { after: options.after };
  const answer = await client.GET(DEPLOYMENT_EVENTS_PATH, {
    params: { path: deployment, query },
    headers: { Accept: "text/event-stream" },
    parseAs: "stream",
    ...(signal === undefined ? {} : { signal }),
  });
  for await (const data of eventData(answer, signal)) {
    yield JSON.parse(data) as DeploymentEventView;
  }
}

/**
 * The `data` of each event of an answer that should be an event stream; throws a
 * `ProblemError` when the API refused, an `Error` when the answer is not an event stream.
 */
async function* eventData(
  answer: { data?: ReadableStream<Uint8Array<ArrayBuffer>> | null; error?: unknown; response: Response },
  signal: AbortSignal | undefined,
): AsyncGenerator<string, void, undefined> {
  const { data, error, response } = answer;
  if (error !== undefined || !response.ok) {
    if (isProblem(error)) {
      throw new ProblemError(error, response.status);
    }
    throw new Error(`${response.status} from ${response.url}: ${JSON.stringify(error)}`);
  }
  const type = response.headers.get("content-type") ?? "";
  if (!type.startsWith("text/event-stream") || data == null) {
    await response.body?.cancel();
    throw new Error(`expected an event stream from ${response.url}, got ${type || "no body"}`);
  }
  const reader = data.pipeThrough(new TextDecoderStream()).getReader();
  try {
    for await (const message of serverSentEvents(reader, signal)) {
      yield message.data;
    }
  } finally {
    await reader.cancel().catch(() => undefined);
  }
}

/** The path of a service's logs (a page of JSON, or Server-Sent Events). */
export const SERVICE_LOGS_PATH =
  "/v1/projects/{project_id}/services/{service_id}/logs" satisfies keyof paths;
type ServiceLogsOperation = paths[typeof SERVICE_LOGS_PATH]["get"];
// Fails to compile unless the document says this operation answers an event stream.
export type _ServiceLogsStreamDeclared = ServiceLogsOperation["responses"][200]["content"]["text/event-stream"];

/** Which service's logs: `project_id`, `service_id`. */
export type ServiceRef = ServiceLogsOperation["parameters"]["path"];

/** What to follow of a service's logs, and from where. */
export type LogFollowOptions = Omit<NonNullable<ServiceLogsOperation["parameters"]["query"]>, "limit"> & {
  /** Ends the stream (the generator returns). */
  signal?: AbortSignal;
};

/**
 * Follows a service's logs as Server-Sent Events: a page of new lines whenever there are some
 * (or the instances left out change), from `options.cursor` (the `next_cursor` of the last
 * page seen: resume with it after a dropped connection), or else from `options.since`, or
 * else from now. The generator returns when `options.signal` is aborted or the connection
 * drops. Throws a `ProblemError` when the API refuses.
 */
export async function* serviceLogs(
  client: BulkheadClient,
  service: ServiceRef,
  options: LogFollowOptions = {},
): AsyncGenerator<LogPageView, void, undefined> {
  const { signal, ...query } = options;
  const answer = await client.GET(SERVICE_LOGS_PATH, {
    params: { path: service, query },
    headers: { Accept: "text/event-stream" },
    parseAs: "stream",
    ...(signal === undefined ? {} : { signal }),
  });
  for await (const data of eventData(answer, signal)) {
    yield JSON.parse(data) as LogPageView;
  }
}

/** One Server-Sent Event: `event` is `message` when the server named none. */
export interface ServerSentEvent {
  id: string | undefined;
  event: string;
  data: string;
}

/**
 * Parses Server-Sent Events (the WHATWG `text/event-stream` format) from decoded text:
 * `event`, `data` (lines joined by `\n`) and `id` fields, comments (heartbeats) skipped, a
 * blank line dispatching each event that has data.
 */
export async function* serverSentEvents(
  reader: ReadableStreamDefaultReader<string>,
  signal?: AbortSignal,
): AsyncGenerator<ServerSentEvent, void, undefined> {
  let buffer = "";
  let id: string | undefined;
  let event = "";
  let data: string[] = [];
  for (;;) {
    if (signal?.aborted) {
      return;
    }
    const { value, done } = await reader.read();
    if (done) {
      return; // An event not ended by a blank line is incomplete: dropped, as the spec says.
    }
    buffer += value;
    // Lines end with CRLF, LF or CR; a CR at the very end may be the first half of a CRLF.
    for (;;) {
      const end = buffer.search(/\r\n|\n|\r(?!$)/);
      if (end < 0) {
        break;
      }
      const line = buffer.slice(0, end);
      buffer = buffer.slice(buffer.startsWith("\r\n", end) ? end + 2 : end + 1);
      if (line === "") {
        if (data.length > 0) {
          yield { id, event: event || "message", data: data.join("\n") };
        }
        event = "";
        data = [];
        continue;
      }
      if (line.startsWith(":")) {
        continue;
      }
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let text = colon < 0 ? "" : line.slice(colon + 1);
      if (text.startsWith(" ")) {
        text = text.slice(1);
      }
      if (field === "data") {
        data.push(text);
      } else if (field === "event") {
        event = text;
      } else if (field === "id" && !text.includes("\0")) {
        id = text;
      }
    }
  }
}
