import type { JSX } from "preact";
import { useState } from "preact/hooks";

import type { components } from "@bulkhead/client";
import { api, idempotencyKey, must } from "../api";
import { atLeast, useMe, useProjectRole } from "../me";
import { usePoll } from "../poll";
import { href } from "../router";
import { Checkbox, ConfirmButton, Field, ProblemAlert, SecretShownOnce, Section, Select, StateText, Table, Time, useAction } from "../ui";

type Installation = components["schemas"]["GitInstallationView"];
type Created = components["schemas"]["GitInstallationCreated"];
type Binding = components["schemas"]["PushBinding"];
type Service = { id: string; name: string };

/**
 * A project's git installations (push webhooks from a forge): which pushes deploy which
 * service, where commit statuses go, the secret (shown once, rotated), and each one's
 * delivery log.
 */
export function GitInstallations({ projectId }: { projectId: string }): JSX.Element {
  const me = useMe();
  const { role } = useProjectRole(projectId);
  const path = { project_id: projectId };
  const project = usePoll((headers) => api.GET("/v1/projects/{project_id}", { params: { path }, headers }), [projectId], 0);
  const list = usePoll((headers) => api.GET("/v1/projects/{project_id}/git-installations", { params: { path, query: { limit: 200 } }, headers }), [projectId]);
  const services = usePoll((headers) => api.GET("/v1/projects/{project_id}/services", { params: { path, query: { limit: 200 } }, headers }), [projectId], 0);
  const [selected, setSelected] = useState<string | undefined>(undefined);
  const [secret, setSecret] = useState<Created | undefined>(undefined);
  const action = useAction();
  const canAdmin = atLeast(role, "admin", me);
  const items = list.data?.items ?? [];
  const serviceList: Service[] = (services.data?.items ?? []).map((s) => ({ id: s.id, name: s.name }));
  const serviceName = (id: string): string => serviceList.find((s) => s.id === id)?.name ?? id;
  const shown = items.find((i) => i.id === selected);

  const rotate = (i: Installation): void =>
    void action.run(async () => {
      setSecret(
        await must(
          api.POST("/v1/projects/{project_id}/git-installations/{installation_id}/secret", {
            params: { path: { project_id: projectId, installation_id: i.id }, header: { "idempotency-key": idempotencyKey() } },
          }),
        ),
      );
      list.reload();
    }, "New secret made: the previous one is accepted for an hour more.");

  return (
    <>
      <nav aria-label="Breadcrumb" class="crumbs">
        <a href={href("projects")}>Projects</a> / <a href={href("projects", projectId)}>{project.data?.name ?? "…"}</a> /{" "}
        <span aria-current="page">Git pushes</span>
      </nav>
      <h1>Git pushes</h1>
      <p class="muted">A push to a bound branch deploys its service. Each installation is a webhook to set in the repository's settings at the forge.</p>
      {secret ? <SecretOnce created={secret} onDone={() => setSecret(undefined)} /> : null}
      <Section title="Installations">
        <ProblemAlert problem={list.error ?? action.problem} />
        <Table label="Git installations" head={["Forge", "Bindings", "Commit statuses", "Created", "Actions"]} empty={items.length === 0} emptyText="No installation yet.">
          {items.map((i) => (
            <tr key={i.id}>
              <th scope="row">
                {i.forge} <code class="small">{i.id.slice(0, 8)}</code>
              </th>
              <td>{i.bindings.length === 0 ? <span class="muted">none</span> : i.bindings.map((b) => <div key={`${b.repository}/${b.branch}/${b.service_id}`}>{`${b.repository} ${b.branch} → ${serviceName(b.service_id)}`}</div>)}</td>
              <td>
                {i.commit_statuses ? (
                  <>
                    <code>{i.commit_statuses.api_url}</code>
                    {i.commit_statuses.held_for_secs ? <span class="state warn"> held {i.commit_statuses.held_for_secs} s</span> : null}
                  </>
                ) : (
                  <span class="muted">off</span>
                )}
              </td>
              <td>
                <Time value={i.created_at} />
              </td>
              <td>
                <div class="actions">
                <button type="button" aria-pressed={selected === i.id} onClick={() => setSelected(selected === i.id ? undefined : i.id)}>
                  Details
                </button>
                {canAdmin ? (
                  <>
                    <button type="button" disabled={action.busy} onClick={() => rotate(i)}>
                      Rotate secret
                    </button>
                    <ConfirmButton
                      label={`Delete installation ${i.id.slice(0, 8)}`}
                      question="Delete this installation and its deliveries? Pushes to it are refused from then on."
                      busy={action.busy}
                      onConfirm={() =>
                        void action
                          .run(() => must(api.DELETE("/v1/projects/{project_id}/git-installations/{installation_id}", { params: { path: { project_id: projectId, installation_id: i.id } } })), "Installation deleted.")
                          .then(list.reload)
                      }
                    >
                      Delete
                    </ConfirmButton>
                  </>
                ) : null}
                </div>
              </td>
            </tr>
          ))}
        </Table>
      </Section>
      {shown ? <InstallationDetails key={shown.id} projectId={projectId} installation={shown} services={serviceList} canAdmin={canAdmin} onSaved={list.reload} /> : null}
      {canAdmin ? (
        <CreateInstallation
          projectId={projectId}
          services={serviceList}
          onCreated={(created) => {
            setSecret(created);
            list.reload();
          }}
        />
      ) : null}
    </>
  );
}

/** The secret of a new (or rotated) installation, shown once, with where to paste it. */
function SecretOnce(props: { created: Created; onDone: () => void }): JSX.Element {
  return (
    <SecretShownOnce
      id="git-secret"
      title="Set this webhook at the forge"
      intro={
        <>
          In the repository's webhook settings: payload URL, content type <code>application/json</code>, the push event, and this secret. It is shown only once.
        </>
      }
      fields={[
        { id: "git-url", label: "Payload URL", value: `${location.origin}${props.created.hook_path}` },
        { id: "git-secret-value", label: "Secret", value: props.created.secret },
      ]}
      doneLabel="I have set it"
      onDone={props.onDone}
    />
  );
}

/** Bindings being edited: repository, branch and service each. */
function BindingsEditor(props: { value: Binding[]; onChange: (v: Binding[]) => void; services: Service[] }): JSX.Element {
  const set = (n: number, change: Partial<Binding>): void => props.onChange(props.value.map((b, i) => (i === n ? { ...b, ...change } : b)));
  return (
    <fieldset>
      <legend>Bindings: a push to the branch deploys the service</legend>
      {props.value.map((b, n) => (
        <div class="var-row" key={n}>
          <Field label={`Repository ${n + 1}`} value={b.repository} onInput={(v) => set(n, { repository: v })} placeholder="owner/name" required />
          <Field label={`Branch ${n + 1}`} value={b.branch} onInput={(v) => set(n, { branch: v })} required />
          <Select label={`Service ${n + 1}`} value={b.service_id} onChange={(v) => set(n, { service_id: v })} options={props.services.map((s) => ({ value: s.id, label: s.name }))} />
          <button type="button" onClick={() => props.onChange(props.value.filter((_, i) => i !== n))}>
            Remove binding {n + 1}
          </button>
        </div>
      ))}
      <button type="button" disabled={props.services.length === 0} onClick={() => props.onChange([...props.value, { repository: "", branch: "main", service_id: props.services[0]?.id ?? "" }])}>
        Add a binding
      </button>
    </fieldset>
  );
}

/** Commit statuses being edited: off, or the forge's API and a token (write-only). */
function StatusesEditor(props: { on: boolean; onToggle: (v: boolean) => void; apiUrl: string; onApiUrl: (v: string) => void; token: string; onToken: (v: string) => void; hint?: string }): JSX.Element {
  return (
    <fieldset>
      <legend>Commit statuses</legend>
      <Checkbox label="Report each deployment's state on its commit" checked={props.on} onChange={props.onToggle} />
      {props.on ? (
        <>
          <Field label="Forge API" value={props.apiUrl} onInput={props.onApiUrl} required hint="https://api.github.com, or a GitHub Enterprise Server's https://HOST/api/v3" />
          <Field label="Token" type="password" value={props.token} onInput={props.onToken} required autoComplete="off" hint={props.hint ?? "A token that may write commit statuses; stored sealed, never shown."} />
        </>
      ) : null}
    </fieldset>
  );
}

function CreateInstallation(props: { projectId: string; services: Service[]; onCreated: (c: Created) => void }): JSX.Element {
  const [bindings, setBindings] = useState<Binding[]>([]);
  const [statuses, setStatuses] = useState(false);
  const [apiUrl, setApiUrl] = useState("https://api.github.com");
  const [token, setToken] = useState("");
  const action = useAction();
  const submit = async (e: Event): Promise<void> => {
    e.preventDefault();
    const ok = await action.run(async () => {
      const created = await must(
        api.POST("/v1/projects/{project_id}/git-installations", {
          params: { path: { project_id: props.projectId }, header: { "idempotency-key": idempotencyKey() } },
          body: { bindings, commit_statuses: statuses ? { api_url: apiUrl.trim(), token } : null },
        }),
      );
      props.onCreated(created);
    }, "Installation made: set its webhook at the forge now, its secret is shown only once.");
    if (ok) {
      setBindings([]);
      setToken("");
    }
  };
  return (
    <Section title="Add an installation">
      <form onSubmit={(e) => void submit(e)}>
        <BindingsEditor value={bindings} onChange={setBindings} services={props.services} />
        <StatusesEditor on={statuses} onToggle={setStatuses} apiUrl={apiUrl} onApiUrl={setApiUrl} token={token} onToken={setToken} />
        <ProblemAlert problem={action.problem} />
        <button type="submit" class="primary" disabled={action.busy}>
          Add installation
        </button>
      </form>
    </Section>
  );
}

function InstallationDetails(props: { projectId: string; installation: Installation; services: Service[]; canAdmin: boolean; onSaved: () => void }): JSX.Element {
  const i = props.installation;
  const path = { project_id: props.projectId, installation_id: i.id };
  const one = usePoll((headers) => api.GET("/v1/projects/{project_id}/git-installations/{installation_id}", { params: { path }, headers }), [i.id], 0);
  const deliveries = usePoll(
    (headers) => api.GET("/v1/projects/{project_id}/git-installations/{installation_id}/deliveries", { params: { path, query: { limit: 50, order: "desc" } }, headers }),
    [i.id],
  );
  const [bindings, setBindings] = useState<Binding[]>(i.bindings);
  const [statuses, setStatuses] = useState(i.commit_statuses != null);
  const [apiUrl, setApiUrl] = useState(i.commit_statuses?.api_url ?? "https://api.github.com");
  const [token, setToken] = useState("");
  const action = useAction();
  const serviceName = (id: string): string => props.services.find((s) => s.id === id)?.name ?? id;
  const list = deliveries.data?.items ?? [];

  const save = async (e: Event): Promise<void> => {
    e.preventDefault();
    // The token is write-only: left empty, the statuses (and their token) are kept as they are.
    const body: components["schemas"]["GitInstallationUpdate"] = { bindings };
    if (!statuses) body.commit_statuses = null;
    else if (token !== "") body.commit_statuses = { api_url: apiUrl.trim(), token };
    await action.run(async () => {
      await must(
        api.PATCH("/v1/projects/{project_id}/git-installations/{installation_id}", {
          params: { path, header: one.etag ? { "If-Match": one.etag } : {} },
          body,
        }),
      );
      setToken("");
      one.reload();
      props.onSaved();
    }, "Installation saved.");
  };

  return (
    <Section title={`Installation ${i.id.slice(0, 8)}`}>
      <p>
        Payload URL: <code>{`${location.origin}${i.hook_path}`}</code>
      </p>
      {i.previous_secret_until ? (
        <p class="muted small">
          The previous secret is accepted until <Time value={i.previous_secret_until} />.
        </p>
      ) : null}
      {props.canAdmin ? (
        <form onSubmit={(e) => void save(e)}>
          <BindingsEditor value={bindings} onChange={setBindings} services={props.services} />
          <StatusesEditor
            on={statuses}
            onToggle={setStatuses}
            apiUrl={apiUrl}
            onApiUrl={setApiUrl}
            token={token}
            onToken={setToken}
            hint={i.commit_statuses ? "Leave empty to keep the token set now; a new one replaces it." : undefined}
          />
          <ProblemAlert problem={action.problem} />
          <button type="submit" class="primary" disabled={action.busy || (statuses && i.commit_statuses == null && token === "")}>
            Save installation
          </button>
        </form>
      ) : null}
      <h3>Deliveries</h3>
      <ProblemAlert problem={deliveries.error} />
      <Table label="Deliveries" head={["Received", "Repository", "Branch", "Commit", "Pusher", "State", "Why", "Deployed"]} empty={list.length === 0} emptyText="No delivery in the last 7 days.">
        {list.map((d) => (
          <tr key={d.id}>
            <th scope="row">
              <Time value={d.received_at} />
            </th>
            <td>{d.repository}</td>
            <td>{d.branch}</td>
            <td>
              <code title={d.message}>{d.commit.slice(0, 12)}</code>
            </td>
            <td>{d.pusher}</td>
            <td>
              <StateText value={d.state} />
            </td>
            <td>{d.reason || "—"}</td>
            <td>
              {d.deployment_ids.length === 0
                ? "—"
                : deployedServices(i.bindings, d).map((id) => (
                    <div key={id}>
                      <a href={href("projects", props.projectId, "services", id)}>{serviceName(id)}</a>
                    </div>
                  ))}
            </td>
          </tr>
        ))}
      </Table>
    </Section>
  );
}

/** The services a delivery deployed: those its repository and branch are bound to. */
function deployedServices(bindings: Binding[], d: components["schemas"]["GitDeliveryView"]): string[] {
  const ids = bindings.filter((b) => b.repository.toLowerCase() === d.repository.toLowerCase() && b.branch === d.branch).map((b) => b.service_id);
  return [...new Set(ids)];
}
