import type { JSX } from "preact";
import { useState } from "preact/hooks";

import { SessionError, signIn } from "../session";
import { announce, Field } from "../ui";

export function SignIn(props: { onSignedIn: () => void }): JSX.Element {
  const [email, setEmail] = useState("");
  const [password, setPassword] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | undefined>(undefined);

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
    </main>
  );
}
