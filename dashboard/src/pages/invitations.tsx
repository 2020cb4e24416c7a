import type { JSX } from "preact";

import { api, idempotencyKey, must } from "../api";
import { usePoll } from "../poll";
import { href, navigate } from "../router";
import { Loading, ProblemAlert, Section, Table, Time, useAction } from "../ui";

/** The invitations addressed to the signed-in user. */
export function MyInvitations(): JSX.Element {
  const list = usePoll((headers) => api.GET("/v1/me/invitations", { params: { query: { limit: 200 } }, headers }), []);
  const action = useAction();
  const items = list.data?.items ?? [];
  return (
    <>
      <h1>My invitations</h1>
      <Section title="Invitations to projects">
        <ProblemAlert problem={list.error} />
        <ProblemAlert problem={action.problem} />
        {list.data === undefined && !list.error ? (
          <Loading what="invitations" />
        ) : (
          <Table label="My invitations" head={["Project", "Role", "Expires", "Actions"]} empty={items.length === 0} emptyText="No invitation for you.">
            {items.map((i) => (
              <tr key={i.id}>
                <th scope="row">
                  {i.project_name} <code class="small">{i.project_id}</code>
                </th>
                <td>{i.role}</td>
                <td>
                  <Time value={i.expires_at} />
                </td>
                <td>
                  <button
                    type="button"
                    class="primary"
                    aria-label={`Accept invitation as ${i.role} to project ${i.project_name}`}
                    disabled={action.busy}
                    onClick={() =>
                      void action
                        .run(
                          () =>
                            must(
                              api.POST("/v1/me/invitations/{invitation_id}/accept", {
                                params: { path: { invitation_id: i.id }, header: { "idempotency-key": idempotencyKey() } },
                              }),
                            ),
                          `Invitation accepted: you are a ${i.role} of ${i.project_name} now.`,
                        )
                        .then((ok) => (ok ? navigate("projects", i.project_id) : list.reload()))
                    }
                  >
                    Accept
                  </button>{" "}
                  <button
                    type="button"
                    class="danger"
                    aria-label={`Decline invitation to project ${i.project_name}`}
                    disabled={action.busy}
                    onClick={() =>
                      void action
                        .run(() => must(api.DELETE("/v1/me/invitations/{invitation_id}", { params: { path: { invitation_id: i.id } } })), "Invitation declined.")
                        .then(list.reload)
                    }
                  >
                    Decline
                  </button>
                </td>
              </tr>
            ))}
          </Table>
        )}
        <p>
          <a href={href("projects")}>Back to your projects</a>
        </p>
      </Section>
    </>
  );
}
