import type { JSX } from "preact";
import { useEffect, useState } from "preact/hooks";

import type { components } from "@bulkhead/client";
import { api, must, problemOf } from "../api";
import { outsideStart } from "../outside";
import { SessionError, signIn } from "../session";
import { announce, Field } from "../ui";

type SignInProviderView = components["schemas"]["SignInProviderView"];

/**
 * The sign-in page: email and password, and a button for each outside provider the operator
 * configured. `notice`: why the last attempt did not sign in (e.g. from the callback page).
 */
export function SignIn(props: { onSignedIn: () => void; notice?: string }): JSX.Element {
  const [email, setEmail] = useState("");
  const [password, setPassword] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | undefined>(props.notice);
  const [providers, setProviders] = useState<SignInProviderView[]>([]);

  useEffect(() => {
    must(api.GET("/v1/auth/providers"))
      .then(setProviders)
      .catch(() => setProviders([]));
  }, []);

  const outside = async (name: string): Promise<void> => {
    setBusy(true);
    setError(undefined);
    try {
      await outsideStart(name, "sign-in");
    } catch (e) {
      setError(problemOf(e).detail);
      setBusy(false);
    }
  };

  const submit = async (e: Event): Promise<void> => {
    e.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      await signIn(email.trim(), password);
      setPassword("");
      announce("Signed in.");
      props.onSignedIn();
    } catch (err) {
      let text = err instanceof Error ? err.message : String(err);
      if (err instanceof SessionError && err.retryAfter !== undefined) {
        text += ` Try again in ${err.retryAfter} s.`;
      }
      setError(text);
    } finally {
      setBusy(false);
    }
  };

  return (
    <main id="main" class="narrow">
      <h1>Sign in to Bulkhead</h1>
      <form class="card" onSubmit={(e) => void submit(e)} aria-describedby={error ? "signin-error" : undefined}>
        <Field label="Email" type="email" value={email} onInput={setEmail} required autoComplete="username" />
        <Field label="Password" type="password" value={password} onInput={setPassword} required autoComplete="current-password" />
        {error ? (
          <div id="signin-error" class="alert" role="alert">
            {error}
          </div>
        ) : null}
        <button type="submit" class="primary" disabled={busy}>
          {busy ? "Signing in…" : "Sign in"}
        </button>
      </form>
      {providers.length > 0 ? (
        <section class="card" aria-labelledby="outside-sign-in">
          <h2 id="outside-sign-in">Or sign in with</h2>
          <div class="actions">
            {providers.map((p) => (
              <button key={p.name} type="button" disabled={busy} onClick={() => void outside(p.name)}>
                Sign in with {p.name}
              </button>
            ))}
          </div>
          <p class="muted small">An account at a provider signs you in once you have linked it from your account page.</p>
        </section>
      ) : null}
    </main>
  );
}
