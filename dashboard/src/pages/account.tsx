import type { JSX } from "preact";
import { useEffect, useState } from "preact/hooks";

import type { components } from "@bulkhead/client";
import { api, must } from "../api";
import { outsideStart } from "../outside";
import { usePoll } from "../poll";
import { ConfirmButton, ProblemAlert, Section, Table, Time, useAction } from "../ui";

type SignInProviderView = components["schemas"]["SignInProviderView"];

/** The signed-in user's outside accounts: linked ones (unlink) and a link button per provider. */
export function Account(): JSX.Element {
  const list = usePoll((headers) => api.GET("/v1/me/identities", { headers }), []);
  const [providers, setProviders] = useState<SignInProviderView[]>([]);
  const action = useAction();
  const linked = list.data ?? [];

  useEffect(() => {
    must(api.GET("/v1/auth/providers"))
      .then(setProviders)
      .catch(() => setProviders([]));
  }, []);

  return (
    <>
      <h1>Your account</h1>
      <Section title="Linked accounts">
        <p class="muted">An account linked here signs you in from the sign-in page's buttons. Linking and unlinking need a signed-in session, not an API token.</p>
        <ProblemAlert problem={list.error} />
        <Table label="Linked accounts" head={["Provider", "Account", "Provider's id", "Linked", "Last used", "Actions"]} empty={linked.length === 0} emptyText="No account linked.">
          {linked.map((i) => (
            <tr key={i.id}>
              <th scope="row">{i.provider}</th>
              <td>{i.login || "—"}</td>
              <td>
                <code>{i.subject}</code>
              </td>
              <td>
                <Time value={i.created_at} />
              </td>
              <td>
                <Time value={i.last_used_at} />
              </td>
              <td>
                <ConfirmButton
                  label={`Unlink ${i.provider} account ${i.login || i.subject}`}
                  question={`Unlink your ${i.provider} account ${i.login || i.subject}? It will no longer sign you in.`}
                  busy={action.busy}
                  onConfirm={() => void action.run(() => must(api.DELETE("/v1/me/identities/{identity_id}", { params: { path: { identity_id: i.id } } })), `${i.provider} account unlinked.`).then(list.reload)}
                >
                  Unlink
                </ConfirmButton>
              </td>
            </tr>
          ))}
        </Table>
      </Section>
      <Section title="Link an account">
        {providers.length === 0 ? <p class="muted">No outside provider is configured on this server.</p> : null}
        <ProblemAlert problem={action.problem} />
        <div class="actions">
          {providers.map((p) => (
            <button key={p.name} type="button" disabled={action.busy} onClick={() => void action.run(() => outsideStart(p.name, "link"))}>
              Link an account at {p.name}
            </button>
          ))}
        </div>
      </Section>
    </>
  );
}
