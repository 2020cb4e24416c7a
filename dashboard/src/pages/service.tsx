import type { JSX } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";

import {
  deploymentEvents,
  FINISHED_DEPLOYMENT_STATES,
  type DeploymentEventView,
  type DeploymentState,
  type DeploymentView,
  type ServiceUpdate,
  type ServiceView,
  type VariableInput,
} from "@bulkhead/client";
import { api, idempotencyKey, must, toProblem } from "../api";
import { atLeast, useMe, useProjectRole } from "../me";
import { usePoll } from "../poll";
import { href } from "../router";
import { useFollowed } from "../stream";
import { announce, Checkbox, Field, Loading, ProblemAlert, Section, StateText, Table, Time, useAction } from "../ui";
import { Logs } from "./logs";
import { parseProviders, providersText, sourceEditable, sourceEdited, sourceText } from "./spec";

function finished(state: string): boolean {
  return (FINISHED_DEPLOYMENT_STATES as readonly string[]).includes(state as DeploymentState);
}

export function Service({ projectId, serviceId }: { projectId: string; serviceId: string }): JSX.Element {
  const me = useMe();
  const { role, known } = useProjectRole(projectId);
  const path = { project_id: projectId, service_id: serviceId };
  const service = usePoll((headers) => api.GET("/v1/projects/{project_id}/services/{service_id}", { params: { path }, headers }), [serviceId]);
  const project = usePoll((headers) => api.GET("/v1/projects/{project_id}", { params: { path: { project_id: projectId } }, headers }), [projectId], 0);
  const deployments = usePoll(
    (headers) => api.GET("/v1/projects/{project_id}/services/{service_id}/deployments", { params: { path, query: { limit: 50, order: "desc" } }, headers }),
    [serviceId],
  );
  const instances = usePoll(
    (headers) => api.GET("/v1/projects/{project_id}/services/{service_id}/instances", { params: { path, query: { limit: 200 } }, headers }),
    [serviceId],
  );
  const [selected, setSelected] = useState<string | undefined>(undefined);
  const [editing, setEditing] = useState(false);
  const [commit, setCommit] = useState("");
  const action = useAction();

  const canDeploy = atLeast(role, "member", me);
  const list = [...(deployments.data?.items ?? [])].sort((a, b) => b.number - a.number);
  const latest = list[0];
  const shown = list.find((d) => d.id === selected) ?? latest;

  // Say it when the shown deployment changes state.
  const lastState = useRef<string | undefined>(undefined);
  useEffect(() => {
    if (shown === undefined) return;
    const key = `${shown.id}:${shown.state}`;
    if (lastState.current !== undefined && lastState.current !== key && lastState.current.startsWith(`${shown.id}:`)) {
      announce(`Deployment #${shown.number} is ${shown.state.replace(/_/g, " ")}.`);
    }
    lastState.current = key;
  }, [shown?.id, shown?.state]);

  if (service.error && !service.data) {
    return (
      <>
        <h1>Service</h1>
        <ProblemAlert problem={service.error} />
      </>
    );
  }
  const s = service.data;
  const ready = s !== undefined && known && deployments.data !== undefined;

  const deploy = (): void => {
    void action.run(async () => {
      const given = commit.trim();
      const d = await must(
        api.POST("/v1/projects/{project_id}/services/{service_id}/deployments", {
          params: { path, query: given === "" ? {} : { commit: given }, header: { "idempotency-key": idempotencyKey() } },
        }),
      );
      setSelected(d.id);
      setCommit("");
      deployments.reload();
    }, "Deployment queued.");
  };
  const rollback = (from: DeploymentView): void => {
    void action.run(async () => {
      const d = await must(
        api.POST("/v1/projects/{project_id}/services/{service_id}/deployments/{deployment_id}/rollback", {
          params: { path: { ...path, deployment_id: from.id }, header: { "idempotency-key": idempotencyKey() } },
        }),
      );
      setSelected(d.id);
      deployments.reload();
    }, `Rolling back from deployment #${from.number}.`);
  };
  const cancel = (d: DeploymentView): void => {
    void action.run(async () => {
      await must(
        api.POST("/v1/projects/{project_id}/services/{service_id}/deployments/{deployment_id}/cancel", {
          params: { path: { ...path, deployment_id: d.id }, header: { "idempotency-key": idempotencyKey() } },
        }),
      );
      deployments.reload();
    }, `Deployment #${d.number} cancelled.`);
  };

  return (
    <>
      <nav aria-label="Breadcrumb" class="crumbs">
        <a href={href("projects")}>Projects</a> / <a href={href("projects", projectId)}>{project.data?.name ?? "project"}</a> /{" "}
        <span aria-current="page">{s?.name ?? "…"}</span>
      </nav>
      <h1>{s ? `Service ${s.name}` : "Service"}</h1>
      <p class="muted small">Your role: {me?.is_admin ? "platform administrator" : known ? role ?? "none" : "…"}</p>
      {canDeploy ? (
        <div class="toolbar" role="group" aria-label="Deployment actions">
          <Field
            label="Commit (optional)"
            value={commit}
            onInput={setCommit}
            placeholder="latest pushed"
            hint="A full commit id; empty: the latest commit pushed to a bound branch."
          />
          <button type="button" class="primary" disabled={!ready || action.busy} onClick={deploy}>
            Deploy
          </button>
          {latest !== undefined ? (
            <button type="button" disabled={action.busy} onClick={() => rollback(latest)} aria-describedby="rollback-hint">
              Roll back
            </button>
          ) : null}
          {latest !== undefined && !finished(latest.state) ? (
            <button type="button" class="danger" disabled={action.busy} onClick={() => cancel(latest)}>
              Cancel deployment
            </button>
          ) : null}
          {latest !== undefined ? (
            <span id="rollback-hint" class="muted small">
              Roll back deploys again the spec of the last healthy deployment before #{latest.number}.
            </span>
          ) : null}
        </div>
      ) : null}
      <ProblemAlert problem={action.problem} onDismiss={action.clear} />

      <Section title="Deployments">
        <ProblemAlert problem={deployments.error} />
        {deployments.data === undefined ? (
          <Loading what="deployments" />
        ) : (
          <Table label="Deployments" head={["#", "State", "Commit", "Reason", "Created", "Healthy", "Finished", "Events"]} empty={list.length === 0} emptyText="Not deployed yet.">
            {list.map((d) => (
              <tr key={d.id} aria-current={shown?.id === d.id ? "true" : undefined}>
                <th scope="row">
                  #{d.number}
                  {d.rollback_of ? <span class="muted small"> (rollback)</span> : null}
                </th>
                <td>
                  <StateText value={d.state} />
                </td>
                <td>
                  {d.revision ? (
                    <code title={`${d.revision.commit}${d.image ? ` · ${d.image}` : ""}`}>
                      {d.revision.commit.slice(0, 7)}
                      {d.revision.branch ? ` (${d.revision.branch})` : ""}
                    </code>
                  ) : (
                    <span class="muted">—</span>
                  )}
                </td>
                <td>{d.reason}</td>
                <td>
                  <Time value={d.created_at} />
                </td>
                <td>
                  <Time value={d.healthy_at} />
                </td>
                <td>
                  <Time value={d.finished_at} />
                </td>
                <td>
                  <button type="button" class="link" aria-pressed={shown?.id === d.id} onClick={() => setSelected(d.id)}>
                    Events of #{d.number}
                  </button>
                </td>
              </tr>
            ))}
          </Table>
        )}
      </Section>

      {shown !== undefined ? <EventStream key={shown.id} projectId={projectId} serviceId={serviceId} deployment={shown} onChange={deployments.reload} /> : null}

      <Section title="Instances">
        <ProblemAlert problem={instances.error} />
        {instances.data === undefined ? (
          <Loading what="instances" />
        ) : (
          <Table label="Instances" head={["Instance", "Provider", "Health", "State", "Region", "Address", "Checked"]} empty={instances.data.items.length === 0} emptyText="No instance.">
            {instances.data.items.map((i) => (
              <tr key={i.instance_key}>
                <th scope="row">
                  <code>{i.instance_key}</code>
                </th>
                <td>{i.provider}</td>
                <td>
                  <StateText value={i.health} />
                </td>
                <td>
                  <StateText value={i.state} />
                </td>
                <td>{i.region}</td>
                <td>{i.address ? <code>{i.address}</code> : <span class="muted">—</span>}</td>
                <td>
                  <Time value={i.health_checked_at} />
                </td>
              </tr>
            ))}
          </Table>
        )}
      </Section>

      <Logs key={serviceId} projectId={projectId} serviceId={serviceId} />

      {s ? <Spec service={s} /> : <Loading what="the service" />}
      {s && canDeploy ? (
        editing ? (
          <EditSpec service={s} etag={service.etag} projectId={projectId} onDone={() => { setEditing(false); service.reload(); }} />
        ) : (
          <p>
            <button type="button" onClick={() => setEditing(true)}>
              Edit spec
            </button>
          </p>
        )
      ) : null}
    </>
  );
}

function Spec({ service: s }: { service: ServiceView }): JSX.Element {
  const h = s.health_check;
  return (
    <Section title="Spec">
      <dl class="spec">
        <dt>Source</dt>
        <dd>
          {s.source.type} <code>{sourceText(s.source)}</code>
        </dd>
        <dt>Port</dt>
        <dd>{s.port}</dd>
        <dt>Replicas</dt>
        <dd>{s.replicas}</dd>
        <dt>Size</dt>
        <dd>
          {s.size.cpu_millis / 1000} vCPU, {s.size.memory_mib} MiB each
        </dd>
        <dt>Regions</dt>
        <dd>{s.regions.length ? s.regions.join(", ") : "any"}</dd>
        <dt>Placement</dt>
        <dd>
          {providersText(s.placement) || "every provider"}
          {s.placement.spread === false ? " (best priority takes all)" : " (spread)"}
        </dd>
        <dt>Health check</dt>
        <dd>
          GET <code>{h.path ?? "/"}</code> every {h.interval_ms ?? 2000} ms, timeout {h.timeout_ms ?? 1000} ms, healthy after {h.healthy_threshold ?? 1}, unhealthy after{" "}
          {h.unhealthy_threshold ?? 3}, start within {h.start_timeout_secs ?? 120} s
        </dd>
      </dl>
      <h3>Variables</h3>
      <Table label="Variables" head={["Name", "Value"]} empty={s.variables.length === 0} emptyText="No variable.">
        {s.variables.map((v) => (
          <tr key={v.name}>
            <th scope="row">
              <code>{v.name}</code>
            </th>
            <td>{v.secret ? <em>secret, set</em> : <code>{v.value ?? ""}</code>}</td>
          </tr>
        ))}
      </Table>
    </Section>
  );
}

interface VarRow {
  name: string;
  value: string;
  secret: boolean;
  /** An existing secret whose value we cannot read: left empty, it keeps the stored value. */
  stored: boolean;
}

function EditSpec(props: { service: ServiceView; etag: string | undefined; projectId: string; onDone: () => void }): JSX.Element {
  const s = props.service;
  const [command, setCommand] = useState(sourceEditable(s.source));
  const [repository, setRepository] = useState(s.source.type === "git" ? s.source.repository : "");
  const [port, setPort] = useState(String(s.port));
  const [replicas, setReplicas] = useState(String(s.replicas));
  const [cpuMillis, setCpuMillis] = useState(String(s.size.cpu_millis));
  const [memoryMib, setMemoryMib] = useState(String(s.size.memory_mib));
  const [providers, setProviders] = useState(providersText(s.placement));
  const [healthPath, setHealthPath] = useState(s.health_check.path ?? "/");
  const [vars, setVars] = useState<VarRow[]>(s.variables.map((v) => ({ name: v.name, value: v.secret ? "" : v.value ?? "", secret: v.secret, stored: v.secret })));
  const action = useAction();

  const submit = async (e: Event): Promise<void> => {
    e.preventDefault();
    const ok = await action.run(async () => {
      const body: ServiceUpdate = {
        source: sourceEdited(s.source, command, repository),
        port: Number(port),
        replicas: Number(replicas),
        size: { cpu_millis: Number(cpuMillis), memory_mib: Number(memoryMib) },
        placement: { providers: parseProviders(providers), spread: s.placement.spread ?? true },
        health_check: { ...s.health_check, path: healthPath || "/" },
        variables: vars
          .filter((v) => v.name.trim() !== "")
          .map((v): VariableInput => (v.stored && v.value === "" ? { name: v.name.trim(), secret: v.secret } : { name: v.name.trim(), value: v.value, secret: v.secret })),
      };
      await must(
        api.PATCH("/v1/projects/{project_id}/services/{service_id}", {
          params: { path: { project_id: props.projectId, service_id: s.id }, header: props.etag ? { "If-Match": props.etag } : {} },
          body,
        }),
      );
    }, "Spec saved. Deploy to roll it out.");
    if (ok) props.onDone();
  };
  const update = (i: number, patch: Partial<VarRow>): void => setVars(vars.map((v, j) => (j === i ? { ...v, ...patch } : v)));

  return (
    <form class="card" aria-labelledby="edit-spec" onSubmit={(e) => void submit(e)}>
      <h2 id="edit-spec">Edit spec</h2>
      <div class="grid">
        {s.source.type === "git" && <Field label="Repository" value={repository} onInput={setRepository} required hint="https://, http:// or git://" />}
        <Field label={s.source.type === "artifact" ? "Image" : "Command"} value={command} onInput={setCommand} required />
        <Field label="Port" type="number" value={port} onInput={setPort} required min={1} max={65535} />
        <Field label="Replicas" type="number" value={replicas} onInput={setReplicas} required min={0} max={100} />
        <Field label="CPU (thousandths of a vCPU)" type="number" value={cpuMillis} onInput={setCpuMillis} required min={10} hint="Each instance's; 1000 is one vCPU." />
        <Field label="Memory (MiB)" type="number" value={memoryMib} onInput={setMemoryMib} required min={16} hint="Each instance's; past it, a workload on metal is stopped and restarted." />
        <Field label="Placement providers" value={providers} onInput={setProviders} hint="Comma-separated, optional :weight; empty: every provider." />
        <Field label="Health check path" value={healthPath} onInput={setHealthPath} />
      </div>
      <fieldset>
        <legend>Variables</legend>
        {vars.map((v, i) => (
          <div class="var-row" key={i}>
            <Field label={`Variable ${i + 1} name`} value={v.name} onInput={(x) => update(i, { name: x })} />
            <Field
              label={`Variable ${i + 1} value`}
              type={v.secret ? "password" : "text"}
              value={v.value}
              onInput={(x) => update(i, { value: x })}
              autoComplete="off"
              {...(v.stored ? { placeholder: "secret, set (leave empty to keep)" } : {})}
            />
            <Checkbox label={`Variable ${i + 1} is secret`} checked={v.secret} onChange={(x) => update(i, { secret: x })} />
            <button type="button" class="danger" onClick={() => setVars(vars.filter((_, j) => j !== i))} aria-label={`Remove variable ${v.name || i + 1}`}>
              Remove
            </button>
          </div>
        ))}
        <button type="button" onClick={() => setVars([...vars, { name: "", value: "", secret: false, stored: false }])}>
          Add variable
        </button>
      </fieldset>
      <ProblemAlert problem={action.problem} />
      <div class="actions">
        <button type="submit" class="primary" disabled={action.busy}>
          Save spec
        </button>
        <button type="button" onClick={props.onDone}>
          Discard changes
        </button>
      </div>
    </form>
  );
}

/**
 * The live events of a deployment: a Server-Sent Events stream through the typed client,
 * resumed after the last `seq` seen when the connection drops, when the server ends it before
 * the deployment finished (e.g. the access token expired), or when the tab becomes visible
 * again (the stream is closed while the tab is hidden).
 */
function EventStream(props: { projectId: string; serviceId: string; deployment: DeploymentView; onChange: () => void }): JSX.Element {
  const d = props.deployment;
  const [events, setEvents] = useState<DeploymentEventView[]>([]);
  const onChange = useRef(props.onChange);
  onChange.current = props.onChange;
  const logRef = useRef<HTMLDivElement>(null);
  // Keep the newest event in view, unless the reader scrolled up.
  useEffect(() => {
    const el = logRef.current;
    if (el !== null && el.scrollHeight - el.scrollTop - el.clientHeight < 80) el.scrollTop = el.scrollHeight;
  }, [events.length]);

  // The last event seen: a reconnection reads on after it.
  const lastSeq = useRef(0);
  const ref = { project_id: props.projectId, service_id: props.serviceId, deployment_id: d.id };
  const { status, problem, setStatus } = useFollowed(async (signal, live) => {
    const after = lastSeq.current > 0 ? { after: lastSeq.current } : {};
    for await (const ev of deploymentEvents(api, ref, { ...after, signal })) {
      live();
      if (ev.seq <= lastSeq.current) continue;
      lastSeq.current = ev.seq;
      setEvents((prev) => [...prev, ev]);
      if (ev.kind.startsWith("deployment.")) onChange.current();
    }
    if (signal.aborted) return "again";
    // The server ends the stream once the deployment has finished (or when it stops).
    const { data } = await api.GET("/v1/projects/{project_id}/services/{service_id}/deployments/{deployment_id}", { params: { path: ref } });
    if (data !== undefined && finished(data.state)) {
      setStatus("ended: the deployment has finished");
      onChange.current();
      return "done";
    }
    return "again";
  }, [d.id]);

  return (
    <Section title={`Events of deployment #${d.number}`} id="events-heading">
      <p>
        State: <StateText value={d.state} /> {d.reason ? <span class="muted">— {d.reason}</span> : null}
      </p>
      <p class="muted small">Stream: {status}</p>
      <ProblemAlert problem={problem === undefined ? undefined : toProblem(problem)} />
      <div class="log" ref={logRef} role="log" aria-label={`Events of deployment #${d.number}`} tabIndex={0}>
        {events.length === 0 ? (
          <p class="muted">No event yet.</p>
        ) : (
          <ol>
            {events.map((ev) => (
              <li key={ev.seq}>
                <span class="muted small">
                  <Time value={ev.created_at} />
                </span>{" "}
                <code class="kind">{ev.kind}</code> {ev.message}
              </li>
            ))}
          </ol>
        )}
      </div>
    </Section>
  );
}
