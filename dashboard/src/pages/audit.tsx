import type { JSX } from "preact";
import { useState } from "preact/hooks";

import type { AuditEventView } from "@bulkhead/client";
import { api, must } from "../api";
import { usePoll } from "../poll";
import { Field, ProblemAlert, Section, Select, Table, Time, useAction } from "../ui";

/**
 * The audit log, newest first (`order=desc`). The API filters by project (`project_id`, the
 * project's admins and owners), action and kind of resource, and pages with `limit`/`cursor`;
 * without a project, administrators see everything and others their own actions.
 */
export function Audit(): JSX.Element {
  const projects = usePoll((headers) => api.GET("/v1/projects", { params: { query: { limit: 200 } }, headers }), [], 0);
  const [project, setProject] = useState("");
  const [limit, setLimit] = useState("50");
  const [action, setAction] = useState("");
  const [resourceType, setResourceType] = useState("");
  const [older, setOlder] = useState<AuditEventView[]>([]);
  const more = useAction();
  const query = {
    order: "desc" as const,
    limit: Number(limit),
    ...(project ? { project_id: project } : {}),
    ...(action.trim() ? { action: action.trim() } : {}),
    ...(resourceType.trim() ? { resource_type: resourceType.trim() } : {}),
  };
  const page = usePoll((headers) => api.GET("/v1/audit-events", { params: { query }, headers }), [project, limit, action, resourceType]);
  const [cursor, setCursor] = useState<string | null | undefined>(undefined);
  const next = cursor === undefined ? page.data?.next_cursor : cursor;
  const shown = [...(page.data?.items ?? []), ...older];

  const reset = (): void => {
    setOlder([]);
    setCursor(undefined);
  };
  return (
    <>
      <h1>Audit log</h1>
      <Section title="Filters">
        <div class="inline-form">
          <Select
            label="Project"
            value={project}
            onChange={(v) => {
              setProject(v);
              reset();
            }}
            options={[{ value: "", label: "All I may see" }, ...(projects.data?.items ?? []).map((p) => ({ value: p.id, label: p.name }))]}
          />
          <Field
            label="Action"
            value={action}
            placeholder="e.g. deployment.create"
            onInput={(v) => {
              setAction(v);
              reset();
            }}
          />
          <Field
            label="Resource type"
            value={resourceType}
            placeholder="e.g. service"
            onInput={(v) => {
              setResourceType(v);
              reset();
            }}
          />
          <Select
            label="Page size"
            value={limit}
            onChange={(v) => {
              setLimit(v);
              reset();
            }}
            options={["20", "50", "100", "200"].map((n) => ({ value: n, label: n }))}
          />
        </div>
      </Section>
      <Section title="Events">
        <ProblemAlert problem={page.error} />
        <Table label="Audit events" head={["When", "Action", "Resource", "Actor", "Request"]} empty={shown.length === 0} emptyText="No event.">
          {shown.map((e) => (
            <tr key={e.id}>
              <th scope="row">
                <Time value={e.occurred_at} />
              </th>
              <td>
                <code>{e.action}</code>
              </td>
              <td>
                {e.resource_type} <code class="small">{e.resource_id}</code>
              </td>
              <td>{e.actor_user_id ? <code class="small">{e.actor_user_id}</code> : "—"}{e.actor_token_id ? " (token)" : ""}</td>
              <td>
                <code class="small">{e.request_id}</code>
              </td>
            </tr>
          ))}
        </Table>
        <ProblemAlert problem={more.problem} />
        {next ? (
          <button
            type="button"
            disabled={more.busy}
            onClick={() =>
              void more.run(async () => {
                const p = await must(api.GET("/v1/audit-events", { params: { query: { ...query, cursor: next } } }));
                setOlder([...older, ...p.items]);
                setCursor(p.next_cursor ?? null);
              })
            }
          >
            Load older events
          </button>
        ) : null}
      </Section>
    </>
  );
}
