import type { JSX } from "preact";
import { useState } from "preact/hooks";

import type { AuditEventView } from "@bulkhead/client";
import { api, must } from "../api";
import { usePoll } from "../poll";
import { ProblemAlert, Section, Select, Table, Time, useAction } from "../ui";

/**
 * The audit log. The API filters by project (`project_id`, the project's admins and owners)
 * and pages with `limit`/`cursor`; without a project, administrators see everything and others
 * their own actions. The action filter below narrows the loaded pages in the browser. (The API
 * lists the oldest events first.)
 */
export function Audit(): JSX.Element {
  const projects = usePoll((headers) => api.GET("/v1/projects", { params: { query: { limit: 200 } }, headers }), [], 0);
  const [project, setProject] = useState("");
  const [limit, setLimit] = useState("50");
  const [action, setAction] = useState("");
  const [older, setOlder] = useState<AuditEventView[]>([]);
  const more = useAction();
  const query = { limit: Number(limit), ...(project ? { project_id: project } : {}) };
  const page = usePoll((headers) => api.GET("/v1/audit-events", { params: { query }, headers }), [project, limit]);
  const [cursor, setCursor] = useState<string | null | undefined>(undefined);
  const next = cursor === undefined ? page.data?.next_cursor : cursor;
  const all = [...(page.data?.items ?? []), ...older];
  const actions = Array.from(new Set(all.map((e) => e.action))).sort();
  const shown = action ? all.filter((e) => e.action === action) : all;

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
          <Select label="Action" value={action} onChange={setAction} options={[{ value: "", label: "Any" }, ...actions.map((a) => ({ value: a, label: a }))]} />
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
            Load more events
          </button>
        ) : null}
      </Section>
    </>
  );
}
