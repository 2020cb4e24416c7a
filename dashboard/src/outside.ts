/**
 * Signing in, or linking an account, through an outside identity provider (OpenID Connect or
 * GitHub). The start asks the server for the provider's page, remembers in `sessionStorage`
 * what this tab started (the provider, its `state`, sign-in or link; no credential: the PKCE
 * verifier stays sealed at the server) and sends the browser there. The provider sends it back
 * to `/sign-in/callback?code=…&state=…&iss=…`, where `callbackTake` reads the answer, forgets
 * it (the URL becomes `/` again, so a reload does not send it twice) and checks it is the one
 * this tab started; `App` then finishes it in cookie mode (a sign-in) or links the account.
 */
import type { components } from "@bulkhead/client";
import { api, must } from "./api";

type SignInFinish = components["schemas"]["SignInFinish"];

/** The page a provider sends the browser back to (the server serves the app there). */
export const CALLBACK_PATH = "/sign-in/callback";
const PENDING = "bulkhead-outside-sign-in";

export type OutsideMode = "sign-in" | "link";

interface Pending {
  provider: string;
  state: string;
  mode: OutsideMode;
}

/** What came back to the callback page. */
export type Callback =
  | { ok: true; provider: string; mode: OutsideMode; finish: SignInFinish }
  | { ok: false; mode: OutsideMode; detail: string };

/** Starts signing in (or, for the signed-in user, linking an account) with `provider`. */
export async function outsideStart(provider: string, mode: OutsideMode): Promise<void> {
  const params = { params: { path: { provider } } };
  const started =
    mode === "sign-in"
      ? await must(api.POST("/v1/auth/providers/{provider}/start", params))
      : await must(api.POST("/v1/me/identities/{provider}/start", params));
  const pending: Pending = { provider, state: started.state, mode };
  sessionStorage.setItem(PENDING, JSON.stringify(pending));
  location.assign(started.authorize_url);
}

/** The provider's answer, when this page is the callback; `undefined` otherwise. */
export function callbackTake(): Callback | undefined {
  if (location.pathname !== CALLBACK_PATH) return undefined;
  const query = new URLSearchParams(location.search);
  history.replaceState(null, "", "/");
  const stored = sessionStorage.getItem(PENDING);
  sessionStorage.removeItem(PENDING);
  let pending: Pending | undefined;
  try {
    pending = stored === null ? undefined : (JSON.parse(stored) as Pending);
  } catch {
    pending = undefined;
  }
  const mode = pending?.mode ?? "sign-in";
  const error = query.get("error");
  if (error !== null) {
    const said = query.get("error_description");
    return { ok: false, mode, detail: `The provider did not sign you in (${error}${said ? `: ${said}` : ""}).` };
  }
  const code = query.get("code");
  const state = query.get("state");
  if (pending === undefined || code === null || state === null || state !== pending.state) {
    return { ok: false, mode, detail: "This sign-in was not started in this tab, or it was finished already: start it again." };
  }
  const iss = query.get("iss");
  const finish: SignInFinish = iss === null ? { code, state } : { code, state, iss };
  return { ok: true, provider: pending.provider, mode, finish };
}
