import type { JSX } from "preact";
import { useState } from "preact/hooks";

import { api, idempotencyKey, must } from "../api";
import { useMe } from "../me";
import { usePoll } from "../poll";
import { href } from "../router";
import { ConfirmButton, Loading, ProblemAlert, Section, StateText, Table, Time, useAction } from "../ui";

export function Provider({ name }: { name: string }): JSX.Element {
  const me = useMe();
  const admin = me?.is_admin === true;
  const path = { name };
  const provider = usePoll((headers) => api.GET("/v1/providers/{name}", { params: { path }, headers }), [name]);
  const p = provider.data;
  return (
    <>
      <nav aria-label="Breadcrumb" class="crumbs">
        <a href={href("providers")}>Providers</a> / <span aria-current="page">{name}</span>
      </nav>
      <h1>Provider {name}</h1>
      <ProblemAlert problem={provider.error} />
      {p === undefined ? (
        !provider.error && <Loading what="the provider" />
      ) : (
        <Section title="Status">
          <dl class="spec">
            <dt>State</dt>
            <dd>
              <StateText value={p.state} />
            </dd>
            <dt>Health</dt>
            <dd>
              <StateText value={p.health ?? "unknown"} />
            </dd>
            {p.health_reason !== undefined ? (
              <>
                <dt>Why</dt>
                <dd class="reason">{p.health_reason || "—"}</dd>
              </>
            ) : null}
            {p.health_changed_at !== undefined ? (
              <>
                <dt>Since</dt>
                <dd>
                  <Time value={p.health_changed_at} />
                </dd>
              </>
            ) : null}
            {p.enabled !== undefined ? (
              <>
                <dt>Enabled</dt>
                <dd>{p.enabled ? "yes" : "no"}</dd>
                <dt>Drained</dt>
                <dd>{p.drained ? "yes" : "no"}</dd>
                <dt>Serving here</dt>
                <dd>{p.serving ? "yes" : "no"}</dd>
              </>
            ) : null}
            {p.plugin ? (
              <>
                <dt>Plugin</dt>
                <dd>
                  {p.plugin.name} {p.plugin.version} (contract {p.plugin.contract_version}) <code class="small">{p.plugin.digest.slice(0, 16)}</code>
                </dd>
              </>
            ) : null}
            {p.calls ? (
              <>
                <dt>Calls</dt>
                <dd>
                  {p.calls.ok} ok, {p.calls.provider_errors} provider errors, {p.calls.timeouts} timeouts, {p.calls.crashes} crashes, {p.calls.memory_exceeded} over memory
                </dd>
              </>
            ) : null}
          </dl>
        </Section>
      )}
      {admin ? (
        <>
          <Evacuation name={name} />
          <Versions name={name} plugin={p?.plugin?.name} previous={p?.previous_digest ?? undefined} current={p?.plugin?.digest} reload={provider.reload} />
          <Events name={name} />
        </>
      ) : null}
    </>
  );
}

function Evacuation({ name }: { name: string }): JSX.Element {
  const evac = usePoll((headers) => api.GET("/v1/providers/{name}/evacuation", { params: { path: { name } }, headers }), [name]);
  const action = useAction();
  const e = evac.data;
  const none = evac.error?.status === 404;
  return (
    <Section title="Evacuation">
      {!none ? <ProblemAlert problem={evac.error} /> : null}
      {e ? (
        <>
          <p>
            <StateText value={e.state} /> — {e.moved} of {e.total} instances moved
            {e.finished_at ? (
              <>
                , finished <Time value={e.finished_at} />
              </>
            ) : null}
          </p>
          <progress max={Math.max(e.total, 1)} value={e.moved} aria-label={`Evacuation of ${name}`}>
            {e.moved}/{e.total}
          </progress>
          {e.unremoved.length > 0 ? <p>Not removed at the provider yet: {e.unremoved.join(", ")}</p> : null}
        </>
      ) : (
        <p class="muted">{none ? "No evacuation." : "…"}</p>
      )}
      <ProblemAlert problem={action.problem} />
      <div class="actions">
        {e?.state === "running" ? (
          <button type="button" class="danger" disabled={action.busy} onClick={() => void action.run(() => must(api.DELETE("/v1/providers/{name}/evacuation", { params: { path: { name } } })), "Evacuation cancelled.").then(evac.reload)}>
            Cancel evacuation
          </button>
        ) : (
          <ConfirmButton
            question={`Move every instance off ${name}?`}
            busy={action.busy}
            onConfirm={() =>
              void action
                .run(() => must(api.POST("/v1/providers/{name}/evacuation", { params: { path: { name }, header: { "idempotency-key": idempotencyKey() } } })), `Evacuation of ${name} started.`)
                .then(evac.reload)
            }
          >
            Evacuate
          </ConfirmButton>
        )}
      </div>
    </Section>
  );
}

function Versions(props: { name: string; plugin: string | undefined; previous: string | undefined; current: string | undefined; reload: () => void }): JSX.Element {
  const { name } = props;
  const activations = usePoll((headers) => api.GET("/v1/providers/{name}/activations", { params: { path: { name }, query: { limit: 50, order: "desc" } }, headers }), [name], 5000);
  const plugins = usePoll((headers) => api.GET("/v1/plugins", { params: { query: { limit: 200 } }, headers }), [], 10000);
  const action = useAction();
  const [file, setFile] = useState<File | undefined>(undefined);
  // The binaries of this provider's plugin (all of them while it has none).
  const binaries = (plugins.data?.items ?? []).filter((b) => props.plugin === undefined || b.name === props.plugin);
  const after = (): void => {
    activations.reload();
    plugins.reload();
    props.reload();
  };
  return (
    <Section title="Plugin versions">
      <ProblemAlert problem={action.problem} onDismiss={action.clear} />
      <div class="actions">
        <button
          type="button"
          disabled={action.busy || props.previous === undefined}
          onClick={() =>
            void action
              .run(() => must(api.POST("/v1/providers/{name}/rollback", { params: { path: { name }, header: { "idempotency-key": idempotencyKey() } } })), `${name} rolled back to its previous plugin.`)
              .then(after)
          }
        >
          Roll back plugin
        </button>
        {props.previous ? <span class="muted small">to {props.previous.slice(0, 16)}</span> : <span class="muted small">no previous version</span>}
      </div>
      <h3>Stored binaries</h3>
      <ProblemAlert problem={plugins.error} />
      <Table label="Stored plugin binaries" head={["Name", "Version", "Contract", "Size", "Digest", "Uploaded", "Actions"]} empty={binaries.length === 0} emptyText="No stored binary of this plugin.">
        {binaries.map((b) => (
          <tr key={b.digest}>
            <th scope="row">{b.name}</th>
            <td>{b.version}</td>
            <td>{b.contract_version}</td>
            <td>{Math.round(b.size / 1024)} KiB</td>
            <td>
              <code class="small">{b.digest.slice(0, 16)}</code>
            </td>
            <td>
              <Time value={b.created_at} />
            </td>
            <td>
              {b.digest === props.current ? (
                <span class="state good">active</span>
              ) : (
                <button
                  type="button"
                  disabled={action.busy}
                  aria-label={`Activate ${b.name} ${b.version} on ${name}`}
                  onClick={() =>
                    void action
                      .run(() => must(api.POST("/v1/providers/{name}/activate", { params: { path: { name }, header: { "idempotency-key": idempotencyKey() } }, body: { digest: b.digest } })), `${name} now runs ${b.name} ${b.version}.`)
                      .then(after)
                  }
                >
                  Activate
                </button>
              )}
            </td>
          </tr>
        ))}
      </Table>
      <form
        class="inline-form"
        onSubmit={(e) => {
          e.preventDefault();
          if (!file) return;
          void action
            .run(async () => {
              const bytes = new Uint8Array(await file.arrayBuffer());
              await must(
                api.POST("/v1/plugins", {
                  // The document types the binary body as a string; send the bytes as they are.
                  body: bytes as unknown as string,
                  bodySerializer: (b: unknown) => b as BodyInit,
                  headers: { "Content-Type": "application/wasm" },
                }),
              );
            }, `${file.name} uploaded.`)
            .then(after);
        }}
      >
        <div class="field">
          <label for="wasm-file">Plugin binary (.wasm)</label>
          <input id="wasm-file" type="file" accept=".wasm,application/wasm" onChange={(e) => setFile((e.currentTarget as HTMLInputElement).files?.[0])} />
        </div>
        <button type="submit" disabled={action.busy || !file}>
          Upload plugin
        </button>
      </form>
      <h3>Activation history</h3>
      <ProblemAlert problem={activations.error} />
      <Table label="Activation history" head={["When", "Action", "Digest", "By"]} empty={(activations.data?.items.length ?? 0) === 0}>
        {(activations.data?.items ?? []).map((a) => (
          <tr key={a.id}>
            <th scope="row">
              <Time value={a.created_at} />
            </th>
            <td>{a.action}</td>
            <td>
              <code class="small">{a.digest.slice(0, 16)}</code>
            </td>
            <td>{a.actor_user_id ?? "—"}</td>
          </tr>
        ))}
      </Table>
    </Section>
  );
}

function Events({ name }: { name: string }): JSX.Element {
  const events = usePoll((headers) => api.GET("/v1/providers/{name}/events", { params: { path: { name }, query: { limit: 50, order: "desc" } }, headers }), [name]);
  return (
    <Section title="Health events">
      <ProblemAlert problem={events.error} />
      <Table label="Health events" head={["When", "Kind", "From", "To", "Reason"]} empty={(events.data?.items.length ?? 0) === 0} emptyText="No event.">
        {(events.data?.items ?? []).map((e) => (
          <tr key={e.id}>
            <th scope="row">
              <Time value={e.created_at} />
            </th>
            <td>{e.kind}</td>
            <td>
              <StateText value={e.from} />
            </td>
            <td>
              <StateText value={e.to} />
            </td>
            <td class="reason">{e.reason}</td>
          </tr>
        ))}
      </Table>
    </Section>
  );
}
