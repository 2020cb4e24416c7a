import type { components } from "@bulkhead/client";
import type { JSX } from "preact";

import { api } from "../api";
import { usePoll } from "../poll";
import { Loading, ProblemAlert, Section, StateText, Table, Time } from "../ui";

/** An edge is stale when it has not reported for this long. */
const STALE_SECONDS = 60;

type EdgeCertificates = components["schemas"]["EdgeCertificates"];

/** An edge's certificates in a few words: how many domains have one, and what needs a look. */
function certificatesSummary(certificates: EdgeCertificates | null | undefined): string {
  if (!certificates) return "plain HTTP";
  const parts = [`${certificates.issued} of ${certificates.domains} issued`];
  if (certificates.failing > 0) parts.push(`${certificates.failing} failing`);
  if (certificates.expiring_soon > 0) parts.push(`${certificates.expiring_soon} expiring within 14 days`);
  return parts.join(", ");
}

export function Routing(): JSX.Element {
  // The table itself is only fetched again when it changed (ETag): its revision is in a header.
  const table = usePoll((headers) => api.GET("/v1/routing-table", { params: { header: headers }, headers }), []);
  const edges = usePoll((headers) => api.GET("/v1/edges", { params: { query: { limit: 200 } }, headers }), []);
  const revision = table.data?.table.revision;
  const items = edges.data?.items ?? [];
  const certificates = items.flatMap((e) => (e.certificates?.items ?? []).map((c) => ({ edge: e.id, ...c })));
  const now = Date.now();
  return (
    <>
      <h1>Routing</h1>
      <Section title="Routing table">
        <ProblemAlert problem={table.error} />
        {table.data === undefined && !table.error ? (
          <Loading what="the routing table" />
        ) : table.data ? (
          <dl class="spec">
            <dt>Current revision</dt>
            <dd>{revision}</dd>
            <dt>Signed by key</dt>
            <dd>
              <code>{table.data.key_id}</code>
            </dd>
            <dt>Routes</dt>
            <dd>{table.data.table.routes.length}</dd>
          </dl>
        ) : null}
      </Section>
      <Section title="Edges">
        <ProblemAlert problem={edges.error} />
        {edges.data === undefined && !edges.error ? (
          <Loading what="edges" />
        ) : (
          <Table label="Edges" head={["Edge", "Revision", "Lag", "Snapshot age", "Last report", "Staleness", "Agent", "Certificates", "Last refusal"]} empty={items.length === 0} emptyText="No edge has reported.">
            {items.map((e) => {
              const silent = Math.round((now - new Date(e.reported_at).getTime()) / 1000);
              const stale = silent > STALE_SECONDS;
              return (
                <tr key={e.id}>
                  <th scope="row">
                    <code>{e.id}</code>
                  </th>
                  <td>{e.revision}</td>
                  <td>
                    <StateText value={e.lag === 0 ? "current" : `${e.lag} behind`} />
                  </td>
                  <td>{e.snapshot_age_seconds == null ? "—" : `${Math.round(e.snapshot_age_seconds)} s`}</td>
                  <td>
                    <Time value={e.reported_at} />
                  </td>
                  <td>
                    <StateText value={stale ? `stale (${silent} s silent)` : "fresh"} />
                  </td>
                  <td>{e.agent_version}</td>
                  <td>{certificatesSummary(e.certificates)}</td>
                  <td>{e.last_refusal ? `revision ${e.last_refusal.revision}: ${e.last_refusal.reason}` : "—"}</td>
                </tr>
              );
            })}
          </Table>
        )}
      </Section>
      <Section title="Certificates">
        <p>Each edge obtains a domain's certificate from its ACME CA at the domain's first HTTPS request; failing ones are listed first.</p>
        <Table label="Certificates" head={["Edge", "Domain", "Issuer", "Expires", "Last error"]} empty={certificates.length === 0} emptyText="No edge reports certificates.">
          {certificates.map((c) => (
            <tr key={`${c.edge} ${c.hostname}`}>
              <td>
                <code>{c.edge}</code>
              </td>
              <th scope="row">{c.hostname}</th>
              <td>{c.issuer ?? "not yet issued"}</td>
              <td>{c.not_after ? <Time value={c.not_after} /> : "—"}</td>
              <td>{c.last_error ?? "—"}</td>
            </tr>
          ))}
        </Table>
      </Section>
    </>
  );
}
