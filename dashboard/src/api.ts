/**
 * The typed client of the API (`@bulkhead/client`, generated from openapi/openapi.json): every
 * `/v1` call that the document describes goes through it, so that a change of the API that
 * breaks a page fails `npm run check`.
 */
import createClient from "openapi-fetch";
import { bearerAuth, isProblem, type BulkheadClient, type Problem, type paths } from "@bulkhead/client";

import { refresh, token } from "./session";

/** Sends the request; on a 401, refreshes the session once and sends it again. */
async function fetchWithRefresh(request: Request): Promise<Response> {
  const retry = request.clone();
  const response = await fetch(request);
  if (response.status !== 401 || token() === undefined) return response;
  let ok = false;
  try {
    ok = await refresh();
  } catch {
    ok = false;
  }
  const now = token();
  if (!ok || now === undefined) return response;
  retry.headers.set("Authorization", `Bearer ${now}`);
  return fetch(retry);
}

export const api: BulkheadClient = createClient<paths>({
  baseUrl: location.origin,
  fetch: fetchWithRefresh,
  credentials: "same-origin",
  cache: "no-store",
});
api.use(bearerAuth(() => token()));

/** A problem from an error answer of the typed client (or a made-up one for odd bodies). */
export function toProblem(error: unknown, response?: Response): Problem {
  if (isProblem(error)) return error;
  const status = response?.status ?? 0;
  return {
    type: "about:blank",
    title: response?.statusText ?? "Error",
    status,
    code: "error",
    detail:
      error instanceof Error
        ? error.message
        : typeof error === "string" && error !== ""
          ? error
          : `The server answered ${status || "nothing"}${response?.statusText ? ` ${response.statusText}` : ""}.`,
  };
}

/** A fresh idempotency key for a POST. */
export function idempotencyKey(): string {
  return crypto.randomUUID();
}

/** The outcome of one typed call, for `run` below. */
export interface Outcome<T> {
  data?: T;
  error?: unknown;
  response: Response;
}

/** Throws a `ProblemThrown` for an error answer; returns the data otherwise. */
export class ProblemThrown extends Error {
  readonly problem: Problem;
  constructor(problem: Problem) {
    super(problem.detail);
    this.problem = problem;
  }
}

export async function must<T>(call: Promise<Outcome<T>>): Promise<T> {
  let outcome: Outcome<T>;
  try {
    outcome = await call;
  } catch (e) {
    throw new ProblemThrown(toProblem(e));
  }
  if (outcome.error !== undefined || !outcome.response.ok) {
    throw new ProblemThrown(toProblem(outcome.error, outcome.response));
  }
  return outcome.data as T;
}

export function problemOf(e: unknown): Problem {
  return e instanceof ProblemThrown ? e.problem : toProblem(e);
}
