/**
 * A browser session in cookie mode (`/v1/auth/session`). Called with plain `fetch` rather than
 * the typed client, which would send the in-memory token and retry a 401 through a refresh; the
 * paths and bodies are still typed from the OpenAPI document, so that a change there fails tsc.
 *
 * - The access token lives in this module's memory only (never in Web Storage).
 * - The refresh token is an HttpOnly cookie (`__Secure-bulkhead_refresh`, Path=/v1/auth/session);
 *   the readable `bulkhead_csrf` cookie is echoed in `X-CSRF-Token`.
 * - Every refresh runs under the Web Lock `bulkhead-refresh`, so that two tabs never present the
 *   same (single-use) refresh token: inside the lock, the csrf cookie is read again; when another
 *   tab rotated the session meanwhile, the cookie holds its new value and that is what is sent.
 */

import type { components, paths } from "@bulkhead/client";

export type SessionTokens = components["schemas"]["BrowserSession"];
type LoginRequest = components["schemas"]["LoginRequest"];
type SignInFinish = components["schemas"]["SignInFinish"];

const SESSION: keyof paths = "/v1/auth/session";
const SESSION_REFRESH: keyof paths = "/v1/auth/session/refresh";
const PROVIDER_FINISH: keyof paths = "/v1/auth/session/providers/{provider}/finish";

/** A problem document as the session endpoints answer it. */
export interface SessionProblem {
  status: number;
  title?: string;
  detail?: string;
  code?: string;
}

export class SessionError extends Error {
  readonly status: number;
  readonly code: string | undefined;
  readonly retryAfter: number | undefined;
  constructor(status: number, detail: string, code?: string, retryAfter?: number) {
    super(detail);
    this.name = "SessionError";
    this.status = status;
    this.code = code;
    this.retryAfter = retryAfter;
  }
}

const CSRF_COOKIE = "bulkhead_csrf";
const LOCK = "bulkhead-refresh";
/** Refresh this long before the access token expires (or at 80% of its life if shorter). */
const REFRESH_MARGIN_MS = 30_000;

let accessToken: string | undefined;
let expiresAt = 0;
let knownCsrf: string | undefined;
let timer: ReturnType<typeof setTimeout> | undefined;
let inflight: Promise<boolean> | undefined;
const listeners = new Set<() => void>();

/** The current access token, if signed in. */
export function token(): string | undefined {
  return accessToken;
}

export function signedIn(): boolean {
  return accessToken !== undefined;
}

/** Calls `fn` whenever the session starts or ends. */
export function onSessionChange(fn: () => void): () => void {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

function notify(): void {
  for (const fn of listeners) fn();
}

export function readCsrfCookie(): string | undefined {
  for (const part of document.cookie.split(";")) {
    const [name, ...rest] = part.trim().split("=");
    if (name === CSRF_COOKIE) {
      const value = rest.join("=");
      return value === "" ? undefined : decodeURIComponent(value);
    }
  }
  return undefined;
}

function accept(tokens: SessionTokens): void {
  accessToken = tokens.access_token;
  expiresAt = Date.now() + tokens.expires_in * 1000;
  knownCsrf = readCsrfCookie() ?? tokens.csrf_token;
  schedule(tokens.expires_in * 1000);
  notify();
}

function clear(): void {
  const was = accessToken !== undefined;
  accessToken = undefined;
  expiresAt = 0;
  if (timer !== undefined) clearTimeout(timer);
  timer = undefined;
  if (was) notify();
}

function schedule(lifetimeMs: number): void {
  if (timer !== undefined) clearTimeout(timer);
  const delay = Math.max(1_000, Math.min(lifetimeMs - REFRESH_MARGIN_MS, lifetimeMs * 0.8));
  timer = setTimeout(() => {
    void refresh();
  }, delay);
}

async function problemOf(response: Response): Promise<SessionError> {
  let detail = `${response.status} ${response.statusText}`;
  let code: string | undefined;
  try {
    const body = (await response.json()) as SessionProblem;
    if (typeof body.detail === "string") detail = body.detail;
    if (typeof body.code === "string") code = body.code;
  } catch {
    // not JSON: keep the status line
  }
  const header = response.headers.get("Retry-After");
  const retryAfter = header === null ? undefined : Number(header);
  return new SessionError(response.status, detail, code, Number.isFinite(retryAfter) ? retryAfter : undefined);
}

/** Posts `body` to a session-opening endpoint and keeps the session it answers. */
async function sessionOpen(path: string, body: LoginRequest | SignInFinish): Promise<void> {
  const response = await fetch(path, {
    method: "POST",
    credentials: "same-origin",
    cache: "no-store",
    headers: { "Content-Type": "application/json", Accept: "application/json" },
    body: JSON.stringify(body),
  });
  if (!response.ok) throw await problemOf(response);
  accept((await response.json()) as SessionTokens);
}

/** Signs in with a password; throws a `SessionError` (401 wrong password, 429/503 retry later). */
export async function signIn(email: string, password: string): Promise<void> {
  await sessionOpen(SESSION, { email, password });
}

/**
 * Finishes a sign-in with an outside provider (what it sent back to the callback page); throws
 * a `SessionError` (400 refused, 403 no user linked that account, 503 retry later).
 */
export async function signInWithProvider(provider: string, finish: SignInFinish): Promise<void> {
  await sessionOpen(PROVIDER_FINISH.replace("{provider}", encodeURIComponent(provider)), finish);
}

async function withLock<T>(fn: () => Promise<T>): Promise<T> {
  const locks = (navigator as Navigator & { locks?: LockManager }).locks;
  if (locks === undefined) return fn();
  return locks.request(LOCK, fn) as Promise<T>;
}

/**
 * Exchanges the refresh cookie for a new access token. Resolves `true` when signed in after it,
 * `false` when the session is gone (then the caller shows the sign-in form).
 */
export function refresh(): Promise<boolean> {
  if (inflight !== undefined) return inflight;
  inflight = withLock(async () => {
    const csrf = readCsrfCookie();
    if (csrf === undefined) {
      clear();
      return false;
    }
    // Re-read inside the lock: when it differs from what this tab last saw, another tab has
    // rotated the session meanwhile, and the cookies now hold its new (unused) refresh token;
    // presenting the new csrf value refreshes with that one, never with the spent one.
    if (csrf !== knownCsrf) knownCsrf = csrf;
    const response = await fetch(SESSION_REFRESH, {
      method: "POST",
      credentials: "same-origin",
      cache: "no-store",
      headers: { "X-CSRF-Token": csrf, Accept: "application/json" },
    });
    if (response.status === 401 || response.status === 403) {
      clear();
      return false;
    }
    if (!response.ok) {
      // 429/503 and the like: keep what we have and try again soon.
      const error = await problemOf(response);
      schedule(Math.max(5_000, (error.retryAfter ?? 5) * 1000 + REFRESH_MARGIN_MS));
      throw error;
    }
    accept((await response.json()) as SessionTokens);
    return true;
  }).finally(() => {
    inflight = undefined;
  });
  return inflight;
}

/** On page load: restores the session from the cookies, if there is one. */
export async function restore(): Promise<boolean> {
  if (readCsrfCookie() === undefined) return false;
  try {
    return await refresh();
  } catch {
    return false;
  }
}

/** Ends the session at the server and forgets the token. */
export async function signOut(): Promise<void> {
  const csrf = readCsrfCookie() ?? knownCsrf;
  try {
    await withLock(() =>
      fetch(SESSION, {
        method: "DELETE",
        credentials: "same-origin",
        cache: "no-store",
        headers: csrf === undefined ? {} : { "X-CSRF-Token": csrf },
      }),
    );
  } finally {
    knownCsrf = undefined;
    clear();
  }
}

/** The csrf value this tab last saw (for diagnostics). */
export function lastKnownCsrf(): string | undefined {
  return knownCsrf;
}

// After sleep or a hidden tab, timers may have been late: refresh at once if due.
document.addEventListener("visibilitychange", () => {
  if (!document.hidden && accessToken !== undefined && Date.now() > expiresAt - REFRESH_MARGIN_MS) {
    void refresh().catch(() => undefined);
  }
});
