import type { JSX } from "preact";

import type { ProviderView } from "@bulkhead/client";
import { api, idempotencyKey, must } from "../api";
import { useMe } from "../me";
import { usePoll } from "../poll";
import { href } from "../router";
import { ConfirmButton, Loading, ProblemAlert, Section, StateText, Table, Time, useAction } from "../ui";

/** Providers: everyone sees name, state and health; administrators the rest and the actions. */
export function Providers(): JSX.Element {
  const me = useMe();
  const admin = me?.is_admin === true;
  const list = usePoll((headers) => api.GET("/v1/providers", { params: { query: { limit: 200 } }, headers }), []);
  const action = useAction();
  const items = list.data?.items ?? [];
  const setDrained = (p: ProviderView, drained: boolean): void => {
    void action
      .run(
        () => must(api.PATCH("/v1/providers/{name}", { params: { path: { name: p.name } }, body: { drained } })),
        drained ? `${p.name} drained: it takes no new instances.` : `${p.name} takes new instances again.`,
      )
      .then(list.reload);
  };
  const head = admin ? ["Provider", "State", "Health", "Why", "Since", "Plugin", "Actions"] : ["Provider", "State", "Health"];
  return (
    <>
      <h1>Providers</h1>
      <Section title="All providers">
        <ProblemAlert problem={list.error} />
        <ProblemAlert problem={action.problem} onDismiss={action.clear} />
        {list.data === undefined && !list.error ? (
          <Loading what="providers" />
        ) : (
          <Table label="Providers" head={head} empty={items.length === 0} emptyText="No provider.">
            {items.map((p) => (
              <tr key={p.name}>
                <th scope="row">
                  <a href={href("providers", p.name)}>{p.name}</a>
                </th>
                <td>
                  <StateText value={p.state} />
                </td>
                <td>
                  <StateText value={p.health ?? "unknown"} />
                </td>
                {admin ? (
                  <>
                    <td class="reason">{p.health_reason || <span class="muted">—</span>}</td>
                    <td>
                      <Time value={p.health_changed_at} />
                    </td>
                    <td>{p.plugin ? `${p.plugin.name} ${p.plugin.version}` : <span class="muted">none</span>}</td>
                    <td>
                      {p.drained ? (
                        <button type="button" disabled={action.busy} aria-label={`Undrain ${p.name}`} onClick={() => setDrained(p, false)}>
                          Undrain
                        </button>
                      ) : (
                        <button type="button" disabled={action.busy} aria-label={`Drain ${p.name}`} onClick={() => setDrained(p, true)}>
                          Drain
                        </button>
                      )}{" "}
                      <ConfirmButton
                        label={`Evacuate ${p.name}`}
                        question={`Move every instance off ${p.name}?`}
                        busy={action.busy}
                        onConfirm={() =>
                          void action
                            .run(
                              () => must(api.POST("/v1/providers/{name}/evacuation", { params: { path: { name: p.name }, header: { "idempotency-key": idempotencyKey() } } })),
                              `Evacuation of ${p.name} started.`,
                            )
                            .then(list.reload)
                        }
                      >
                        Evacuate
                      </ConfirmButton>
                    </td>
                  </>
                ) : null}
              </tr>
            ))}
          </Table>
        )}
        {!admin ? <p class="muted small">Administrators also see each provider's reasons, plugin and actions.</p> : null}
      </Section>
    </>
  );
}
