import type { JSX } from "preact";
import { useState } from "preact/hooks";

import type { EnvironmentView, ProjectRole, ServiceCreate } from "@bulkhead/client";
import { api, idempotencyKey, must } from "../api";
import { atLeast, useMe, useProjectRole } from "../me";
import { usePoll } from "../poll";
import { href, navigate } from "../router";
import { ConfirmButton, Field, Loading, ProblemAlert, Section, Select, StateText, Table, Time, useAction } from "../ui";
import { parseCommand, parseProviders, sourceText } from "./spec";

const ROLES: ProjectRole[] = ["viewer", "member", "admin", "owner"];

export function Project({ projectId }: { projectId: string }): JSX.Element {
  const me = useMe();
  const { role } = useProjectRole(projectId);
  const path = { project_id: projectId };
  const project = usePoll((headers) => api.GET("/v1/projects/{project_id}", { params: { path }, headers }), [projectId]);
  const envs = usePoll(
    (headers) => api.GET("/v1/projects/{project_id}/environments", { params: { path, query: { limit: 200 } }, headers }),
    [projectId],
  );
  const services = usePoll(
    (headers) => api.GET("/v1/projects/{project_id}/services", { params: { path, query: { limit: 200 } }, headers }),
    [projectId],
  );
  const canWrite = atLeast(role, "member", me);
  const canAdmin = atLeast(role, "admin", me);

  if (project.error && !project.data) {
    return (
      <>
        <h1>Project</h1>
        <ProblemAlert problem={project.error} />
      </>
    );
  }
  const envList = envs.data?.items ?? [];
  const envName = (id: string): string => envList.find((e) => e.id === id)?.name ?? id;
  return (
    <>
      <nav aria-label="Breadcrumb" class="crumbs">
        <a href={href("projects")}>Projects</a> / <span aria-current="page">{project.data?.name ?? "…"}</span>
      </nav>
      <h1>{project.data ? `Project ${project.data.name}` : "Project"}</h1>
      {project.data?.description ? <p>{project.data.description}</p> : null}
      <p class="muted small">Your role: {me?.is_admin ? "platform administrator" : role ?? "…"}</p>

      <Environments projectId={projectId} list={envList} loading={envs.loading} canWrite={canWrite} canAdmin={canAdmin} reload={envs.reload} />

      <Section title="Services">
        <ProblemAlert problem={services.error} />
        {services.loading && !services.data ? (
          <Loading what="services" />
        ) : (
          <Table label="Services" head={["Name", "Environment", "Source", "Port", "Replicas"]} empty={(services.data?.items.length ?? 0) === 0} emptyText="No service yet.">
            {(services.data?.items ?? []).map((s) => (
              <tr key={s.id}>
                <th scope="row">
                  <a href={href("projects", projectId, "services", s.id)}>{s.name}</a>
                </th>
                <td>{envName(s.environment_id)}</td>
                <td>
                  <code>{sourceText(s.source)}</code>
                </td>
                <td>{s.port}</td>
                <td>{s.replicas}</td>
              </tr>
            ))}
          </Table>
        )}
        {canWrite ? <CreateService projectId={projectId} envs={envList} /> : null}
      </Section>

      <Section title="Integrations">
        <ul>
          <li>
            <a href={href("projects", projectId, "git")}>Git pushes</a>: pushes to a bound branch deploy a service; commit statuses; the delivery log.
          </li>
          <li>
            <a href={href("projects", projectId, "webhooks")}>Webhooks</a>: deployment events posted to your endpoints; their messages.
          </li>
        </ul>
      </Section>

      <Domains projectId={projectId} services={(services.data?.items ?? []).map((s) => ({ id: s.id, name: s.name }))} canWrite={canWrite} />
      <Members projectId={projectId} canAdmin={canAdmin} myId={me?.id} />
      {canAdmin ? <Invitations projectId={projectId} /> : null}
      <Limits projectId={projectId} />
    </>
  );
}

/** The project's caps, with what it holds of each: a create past one is refused. */
function Limits(props: { projectId: string }): JSX.Element {
  const limits = usePoll(
    (headers) => api.GET("/v1/projects/{project_id}/limits", { params: { path: { project_id: props.projectId } }, headers }),
    [props.projectId],
    30_000,
  );
  return (
    <Section title="Limits">
      <ProblemAlert problem={limits.error} />
      {limits.data === undefined ? (
        <Loading what="limits" />
      ) : (
        <Table label="Limits" head={["Counts", "Used", "Most allowed"]}>
          {limits.data.limits.map((l) => (
            <tr key={l.name}>
              <th scope="row">
                {l.counts} <span class="muted small">({l.name})</span>
              </th>
              <td>{l.used >= l.max ? <strong>{l.used} (full)</strong> : l.used}</td>
              <td>{l.max}</td>
            </tr>
          ))}
        </Table>
      )}
    </Section>
  );
}

function Environments(props: {
  projectId: string;
  list: EnvironmentView[];
  loading: boolean;
  canWrite: boolean;
  canAdmin: boolean;
  reload: () => void;
}): JSX.Element {
  const [name, setName] = useState("");
  const action = useAction();
  const path = { project_id: props.projectId };
  return (
    <Section title="Environments">
      {props.loading && props.list.length === 0 ? (
        <Loading what="environments" />
      ) : (
        <Table label="Environments" head={props.canAdmin ? ["Name", "Created", "Actions"] : ["Name", "Created"]} empty={props.list.length === 0} emptyText="No environment yet.">
          {props.list.map((env) => (
            <tr key={env.id}>
              <th scope="row">{env.name}</th>
              <td>
                <Time value={env.created_at} />
              </td>
              {props.canAdmin ? (
                <td>
                  <ConfirmButton
                    label={`Delete environment ${env.name}`}
                    question={`Delete the environment ${env.name}?`}
                    busy={action.busy}
                    onConfirm={() =>
                      void action
                        .run(
                          () => must(api.DELETE("/v1/projects/{project_id}/environments/{environment_id}", { params: { path: { ...path, environment_id: env.id } } })),
                          `Environment ${env.name} deleted.`,
                        )
                        .then(props.reload)
                    }
                  >
                    Delete
                  </ConfirmButton>
                </td>
              ) : null}
            </tr>
          ))}
        </Table>
      )}
      <ProblemAlert problem={action.problem} />
      {props.canWrite ? (
        <form
          class="inline-form"
          onSubmit={(e) => {
            e.preventDefault();
            void action
              .run(
                () =>
                  must(
                    api.POST("/v1/projects/{project_id}/environments", {
                      params: { path, header: { "idempotency-key": idempotencyKey() } },
                      body: { name: name.trim() },
                    }),
                  ),
                `Environment ${name} created.`,
              )
              .then((ok) => {
                if (ok) setName("");
                props.reload();
              });
          }}
        >
          <Field label="Environment name" value={name} onInput={setName} required hint="Lowercase letters, digits and -." />
          <button type="submit" disabled={action.busy}>
            Create environment
          </button>
        </form>
      ) : null}
    </Section>
  );
}

function CreateService(props: { projectId: string; envs: EnvironmentView[] }): JSX.Element {
  const [name, setName] = useState("");
  const [env, setEnv] = useState("");
  const [kind, setKind] = useState<"command" | "artifact" | "git">("command");
  const [command, setCommand] = useState("");
  const [image, setImage] = useState("");
  const [repository, setRepository] = useState("");
  const [build, setBuild] = useState("");
  const [port, setPort] = useState("8080");
  const [replicas, setReplicas] = useState("1");
  const [cpuMillis, setCpuMillis] = useState("");
  const [memoryMib, setMemoryMib] = useState("");
  const [providers, setProviders] = useState("");
  const [healthPath, setHealthPath] = useState("/");
  const action = useAction();
  const envId = env || props.envs[0]?.id || "";

  const submit = async (e: Event): Promise<void> => {
    e.preventDefault();
    let created: string | undefined;
    const ok = await action.run(async () => {
      const body: ServiceCreate = {
        environment_id: envId,
        name: name.trim(),
        source:
          kind === "artifact"
            ? { type: "artifact", image: image.trim() }
            : kind === "git"
              ? { type: "git", repository: repository.trim(), command: parseCommand(command), ...(build.trim() ? { build: parseCommand(build) } : {}) }
              : { type: "command", command: parseCommand(command) },
        port: Number(port),
        replicas: Number(replicas),
        health_check: { path: healthPath || "/" },
      };
      const prefs = parseProviders(providers);
      if (prefs.length > 0) body.placement = { providers: prefs, spread: true };
      if (cpuMillis.trim() !== "" && memoryMib.trim() !== "") body.size = { cpu_millis: Number(cpuMillis), memory_mib: Number(memoryMib) };
      const s = await must(
        api.POST("/v1/projects/{project_id}/services", {
          params: { path: { project_id: props.projectId }, header: { "idempotency-key": idempotencyKey() } },
          body,
        }),
      );
      created = s.id;
    }, `Service ${name} created.`);
    if (ok && created) navigate("projects", props.projectId, "services", created);
  };

  if (props.envs.length === 0) return <p class="muted">Create an environment first to add a service.</p>;
  return (
    <form class="subcard" aria-labelledby="create-service" onSubmit={(e) => void submit(e)}>
      <h3 id="create-service">Create a service</h3>
      <div class="grid">
        <Field label="Service name" value={name} onInput={setName} required hint="Lowercase letters, digits and -." />
        <Select label="Environment" value={envId} onChange={setEnv} options={props.envs.map((e) => ({ value: e.id, label: e.name }))} />
        <Select
          label="Source type"
          value={kind}
          onChange={(v) => setKind(v === "artifact" || v === "git" ? v : "command")}
          options={[
            { value: "command", label: "Command" },
            { value: "artifact", label: "Artifact (image)" },
            { value: "git", label: "Git repository (built on metal)" },
          ]}
        />
        {kind === "git" && <Field label="Repository" value={repository} onInput={setRepository} required hint="https://, http:// or git://; each deployment runs one commit of it." />}
        {kind === "git" && <Field label="Build command" value={build} onInput={setBuild} hint="Optional, run in the code before the command, e.g. npm ci." />}
        {kind !== "artifact" ? (
          <Field label="Command" value={command} onInput={setCommand} required hint='A JSON array, e.g. ["python3","-m","http.server","$PORT"], or words separated by spaces.' />
        ) : (
          <Field label="Image" value={image} onInput={setImage} required />
        )}
        <Field label="Port" type="number" inputMode="numeric" value={port} onInput={setPort} required min={1} max={65535} />
        <Field label="Replicas" type="number" inputMode="numeric" value={replicas} onInput={setReplicas} required min={0} max={100} />
        <Field label="CPU (thousandths of a vCPU)" type="number" inputMode="numeric" value={cpuMillis} onInput={setCpuMillis} required={memoryMib.trim() !== ""} min={10} hint="Each instance's, with its memory; both empty: the platform's default size." />
        <Field label="Memory (MiB)" type="number" inputMode="numeric" value={memoryMib} onInput={setMemoryMib} required={cpuMillis.trim() !== ""} min={16} hint="Each instance's, with its CPU." />
        <Field label="Placement providers" value={providers} onInput={setProviders} hint="Comma-separated provider names; empty: every provider." />
        <Field label="Health check path" value={healthPath} onInput={setHealthPath} />
      </div>
      <ProblemAlert problem={action.problem} />
      <button type="submit" class="primary" disabled={action.busy}>
        Create service
      </button>
    </form>
  );
}

function Domains(props: { projectId: string; services: { id: string; name: string }[]; canWrite: boolean }): JSX.Element {
  const path = { project_id: props.projectId };
  const list = usePoll((headers) => api.GET("/v1/projects/{project_id}/domains", { params: { path, query: { limit: 200 } }, headers }), [props.projectId]);
  const [hostname, setHostname] = useState("");
  const [service, setService] = useState("");
  const action = useAction();
  const serviceId = service || props.services[0]?.id || "";
  const items = list.data?.items ?? [];
  const serviceName = (id: string): string => props.services.find((s) => s.id === id)?.name ?? id;
  return (
    <Section title="Domains">
      <ProblemAlert problem={list.error} />
      <Table label="Domains" head={["Hostname", "Service", "Status", "DNS challenge", "Actions"]} empty={items.length === 0} emptyText="No domain yet.">
        {items.map((d) => (
          <tr key={d.id}>
            <th scope="row">{d.hostname}</th>
            <td>{serviceName(d.service_id)}</td>
            <td>
              <StateText value={d.status} />
            </td>
            <td>
              {d.status === "pending" && d.challenge ? (
                <dl class="challenge">
                  <dt>Type</dt>
                  <dd>{d.challenge.record_type}</dd>
                  <dt>Name</dt>
                  <dd>
                    <code>{d.challenge.name}</code>
                  </dd>
                  <dt>Value</dt>
                  <dd>
                    <code>{d.challenge.value}</code>
                  </dd>
                </dl>
              ) : d.verified_at ? (
                <span>
                  verified <Time value={d.verified_at} />
                </span>
              ) : (
                "—"
              )}
            </td>
            <td>
              {props.canWrite && d.status === "pending" ? (
                <button
                  type="button"
                  aria-label={`Verify ${d.hostname}`}
                  disabled={action.busy}
                  onClick={() =>
                    void action
                      .run(
                        () =>
                          must(
                            api.POST("/v1/projects/{project_id}/domains/{domain_id}/verify", {
                              params: { path: { ...path, domain_id: d.id }, header: { "idempotency-key": idempotencyKey() } },
                            }),
                          ),
                        `${d.hostname} verified.`,
                      )
                      .then(list.reload)
                  }
                >
                  Verify
                </button>
              ) : null}
              {props.canWrite ? (
                <ConfirmButton
                  label={`Remove ${d.hostname}`}
                  question={`Remove ${d.hostname}?`}
                  busy={action.busy}
                  onConfirm={() =>
                    void action
                      .run(() => must(api.DELETE("/v1/projects/{project_id}/domains/{domain_id}", { params: { path: { ...path, domain_id: d.id } } })), `${d.hostname} removed.`)
                      .then(list.reload)
                  }
                >
                  Remove
                </ConfirmButton>
              ) : null}
            </td>
          </tr>
        ))}
      </Table>
      <ProblemAlert problem={action.problem} />
      {props.canWrite && props.services.length > 0 ? (
        <form
          class="inline-form"
          onSubmit={(e) => {
            e.preventDefault();
            void action
              .run(
                () =>
                  must(
                    api.POST("/v1/projects/{project_id}/domains", {
                      params: { path, header: { "idempotency-key": idempotencyKey() } },
                      body: { hostname: hostname.trim(), service_id: serviceId },
                    }),
                  ),
                `${hostname} added: publish the DNS challenge, then verify.`,
              )
              .then((ok) => {
                if (ok) setHostname("");
                list.reload();
              });
          }}
        >
          <Field label="Hostname" value={hostname} onInput={setHostname} required placeholder="app.example.com" />
          <Select label="Domain's service" value={serviceId} onChange={setService} options={props.services.map((s) => ({ value: s.id, label: s.name }))} />
          <button type="submit" disabled={action.busy}>
            Add domain
          </button>
        </form>
      ) : null}
    </Section>
  );
}

function Members(props: { projectId: string; canAdmin: boolean; myId: string | undefined }): JSX.Element {
  const path = { project_id: props.projectId };
  const list = usePoll((headers) => api.GET("/v1/projects/{project_id}/members", { params: { path, query: { limit: 200 } }, headers }), [props.projectId]);
  const action = useAction();
  const items = list.data?.items ?? [];
  return (
    <Section title="Members">
      <ProblemAlert problem={list.error} />
      <Table label="Members" head={props.canAdmin ? ["Name", "Email", "Role", "Actions"] : ["Name", "Email", "Role"]} empty={items.length === 0}>
        {items.map((m) => (
          <tr key={m.user_id}>
            <th scope="row">{m.name || m.email}</th>
            <td>{m.email}</td>
            <td>
              {props.canAdmin ? (
                <Select
                  label={`Role of ${m.email}`}
                  hideLabel
                  value={m.role}
                  onChange={(v) =>
                    void action
                      .run(
                        () =>
                          must(
                            api.PATCH("/v1/projects/{project_id}/members/{user_id}", {
                              params: { path: { ...path, user_id: m.user_id } },
                              body: { role: v as ProjectRole },
                            }),
                          ),
                        `${m.email} is now ${v}.`,
                      )
                      .then(list.reload)
                  }
                  options={ROLES.map((r) => ({ value: r, label: r }))}
                />
              ) : (
                m.role
              )}
            </td>
            {props.canAdmin ? (
              <td>
                <ConfirmButton
                  label={`Remove member ${m.email}`}
                  question={`Remove ${m.email} from the project?`}
                  busy={action.busy}
                  onConfirm={() =>
                    void action
                      .run(() => must(api.DELETE("/v1/projects/{project_id}/members/{user_id}", { params: { path: { ...path, user_id: m.user_id } } })), `${m.email} removed.`)
                      .then(list.reload)
                  }
                >
                  Remove
                </ConfirmButton>
              </td>
            ) : null}
          </tr>
        ))}
      </Table>
      <ProblemAlert problem={action.problem} />
    </Section>
  );
}

function Invitations(props: { projectId: string }): JSX.Element {
  const path = { project_id: props.projectId };
  const list = usePoll((headers) => api.GET("/v1/projects/{project_id}/invitations", { params: { path, query: { limit: 200 } }, headers }), [props.projectId]);
  const [email, setEmail] = useState("");
  const [role, setRole] = useState<ProjectRole>("member");
  const action = useAction();
  const items = list.data?.items ?? [];
  return (
    <Section title="Invitations">
      <ProblemAlert problem={list.error} />
      <Table label="Pending invitations" head={["Email", "Role", "Expires", "Actions"]} empty={items.length === 0} emptyText="No pending invitation.">
        {items.map((i) => (
          <tr key={i.id}>
            <th scope="row">{i.email}</th>
            <td>{i.role}</td>
            <td>
              <Time value={i.expires_at} />
            </td>
            <td>
              <button
                type="button"
                class="danger"
                aria-label={`Revoke invitation of ${i.email}`}
                disabled={action.busy}
                onClick={() =>
                  void action
                    .run(() => must(api.DELETE("/v1/projects/{project_id}/invitations/{invitation_id}", { params: { path: { ...path, invitation_id: i.id } } })), `Invitation of ${i.email} revoked.`)
                    .then(list.reload)
                }
              >
                Revoke
              </button>
            </td>
          </tr>
        ))}
      </Table>
      <ProblemAlert problem={action.problem} />
      <form
        class="inline-form"
        onSubmit={(e) => {
          e.preventDefault();
          void action
            .run(
              () =>
                must(
                  api.POST("/v1/projects/{project_id}/invitations", {
                    params: { path, header: { "idempotency-key": idempotencyKey() } },
                    body: { email: email.trim(), role },
                  }),
                ),
              `${email} invited as ${role}.`,
            )
            .then((ok) => {
              if (ok) setEmail("");
              list.reload();
            });
        }}
      >
        <Field label="Invitee email" type="email" value={email} onInput={setEmail} required />
        <Select label="Invitee role" value={role} onChange={(v) => setRole(v as ProjectRole)} options={ROLES.map((r) => ({ value: r, label: r }))} />
        <button type="submit" disabled={action.busy}>
          Invite
        </button>
      </form>
    </Section>
  );
}
