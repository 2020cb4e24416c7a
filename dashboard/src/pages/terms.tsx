import type { JSX } from "preact";

import type { TermsStatus } from "@bulkhead/client";
import { api, idempotencyKey, must } from "../api";
import { signOut } from "../session";
import { ProblemAlert, Time, useAction } from "../ui";

/** Shown after signing in while the current terms are not accepted: nothing else until then. */
export function Terms(props: { status: TermsStatus; onAccepted: () => void }): JSX.Element {
  const current = props.status.current;
  const action = useAction();
  return (
    <main id="main" class="narrow">
      <h1>Terms of service</h1>
      {current ? (
        <section class="card" aria-labelledby="terms-version">
          <h2 id="terms-version">Version {current.version}</h2>
          <p class="muted small">
            Published <Time value={current.published_at} />
          </p>
          <p class="summary">{current.summary || "No summary was given."}</p>
          <p>
            <a href={current.url} target="_blank" rel="noopener noreferrer">
              Read the full terms (version {current.version})
            </a>
          </p>
          <ProblemAlert problem={action.problem} />
          <div class="actions">
            <button
              type="button"
              class="primary"
              disabled={action.busy}
              onClick={() =>
                void action
                  .run(
                    () =>
                      must(
                        api.POST("/v1/me/terms/acceptances", {
                          params: { header: { "idempotency-key": idempotencyKey() } },
                          body: { version: current.version },
                        }),
                      ),
                    "Terms accepted.",
                  )
                  .then((ok) => ok && props.onAccepted())
              }
            >
              Accept
            </button>
            <button type="button" onClick={() => void signOut()}>
              Sign out
            </button>
          </div>
        </section>
      ) : (
        <p>There are terms to accept, but none is published. Ask an administrator.</p>
      )}
    </main>
  );
}
