import type { JSX } from "preact";
import { useState } from "preact/hooks";

import type { Scope, TokenCreated } from "@bulkhead/client";
import { api, idempotencyKey, must } from "../api";
import { usePoll } from "../poll";
import { Checkbox, ConfirmButton, Field, ProblemAlert, SecretShownOnce, Section, Table, Time, useAction } from "../ui";

const SCOPES: Scope[] = ["read", "write", "deploy", "admin", "routing:read"];

export function Tokens(): JSX.Element {
  const list = usePoll((headers) => api.GET("/v1/tokens", { params: { query: { limit: 200 } }, headers }), []);
  const [name, setName] = useState("");
  const [scopes, setScopes] = useState<Scope[]>(["read"]);
  const [expires, setExpires] = useState("");
  const [created, setCreated] = useState<TokenCreated | undefined>(undefined);
  const action = useAction();
  const items = list.data?.items ?? [];

  const submit = async (e: Event): Promise<void> => {
    e.preventDefault();
    await action.run(async () => {
      const t = await must(
        api.POST("/v1/tokens", {
          params: { header: { "idempotency-key": idempotencyKey() } },
          body: expires ? { name: name.trim(), scopes, expires_at: new Date(expires).toISOString() } : { name: name.trim(), scopes },
        }),
      );
      setCreated(t);
      setName("");
      list.reload();
    }, "Token created: copy its secret now, it is shown only once.");
  };

  return (
    <>
      <h1>API tokens</h1>
      {created ? (
        <SecretShownOnce
          id="new-token"
          title={`New token ${created.name}`}
          intro="This secret is shown only once. Copy it now and keep it safe."
          fields={[{ id: "token-secret", label: "Secret", value: created.secret }]}
          doneLabel="I have copied it"
          onDone={() => setCreated(undefined)}
        />
      ) : null}
      <Section title="Create a token">
        <form onSubmit={(e) => void submit(e)}>
          <Field label="Token name" value={name} onInput={setName} required />
          <fieldset>
            <legend>Scopes</legend>
            {SCOPES.map((s) => (
              <Checkbox key={s} label={s} checked={scopes.includes(s)} onChange={(on) => setScopes(on ? [...scopes, s] : scopes.filter((x) => x !== s))} />
            ))}
          </fieldset>
          <Field label="Expires at (optional)" type="datetime-local" value={expires} onInput={setExpires} />
          <ProblemAlert problem={action.problem} />
          <button type="submit" class="primary" disabled={action.busy || scopes.length === 0}>
            Create token
          </button>
        </form>
      </Section>
      <Section title="Your tokens">
        <ProblemAlert problem={list.error} />
        <Table label="API tokens" head={["Name", "Prefix", "Scopes", "Created", "Last used", "Expires", "Status", "Actions"]} empty={items.length === 0} emptyText="No token.">
          {items.map((t) => (
            <tr key={t.id}>
              <th scope="row">{t.name}</th>
              <td>
                <code>{t.prefix}…</code>
              </td>
              <td>{t.scopes.join(", ")}</td>
              <td>
                <Time value={t.created_at} />
              </td>
              <td>
                <Time value={t.last_used_at} />
              </td>
              <td>
                <Time value={t.expires_at} />
              </td>
              <td>{t.revoked_at ? <span class="state bad">revoked</span> : <span class="state good">active</span>}</td>
              <td>
                {!t.revoked_at ? (
                  <ConfirmButton
                    label={`Revoke token ${t.name}`}
                    question={`Revoke the token ${t.name}?`}
                    busy={action.busy}
                    onConfirm={() => void action.run(() => must(api.DELETE("/v1/tokens/{token_id}", { params: { path: { token_id: t.id } } })), `Token ${t.name} revoked.`).then(list.reload)}
                  >
                    Revoke
                  </ConfirmButton>
                ) : null}
              </td>
            </tr>
          ))}
        </Table>
      </Section>
    </>
  );
}
