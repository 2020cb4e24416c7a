import type { JSX } from "preact";
import { useState } from "preact/hooks";

import type { components } from "@bulkhead/client";
import { api, idempotencyKey, must } from "../api";
import { atLeast, useMe, useProjectRole } from "../me";
import { usePoll } from "../poll";
import { href } from "../router";
import { Checkbox, ConfirmButton, Field, ProblemAlert, SecretShownOnce, Section, StateText, Table, Time, useAction } from "../ui";

type Endpoint = components["schemas"]["WebhookEndpointView"];
type Created = components["schemas"]["WebhookEndpointCreated"];
type EventType = components["schemas"]["WebhookEventType"];

const EVENT_TYPES: EventType[] = ["deployment.queued", "deployment.healthy", "deployment.failed", "deployment.cancelled", "deployment.superseded"];

/**
 * A project's outbound webhooks (Standard Webhooks): endpoints with the events they get, their
 * signing secret (shown once, rotated), and each one's messages, which an admin may replay.
 */
export function Webhooks({ projectId }: { projectId: string }): JSX.Element {
  const me = useMe();
  const { role } = useProjectRole(projectId);
  const path = { project_id: projectId };
  const project = usePoll((headers) => api.GET("/v1/projects/{project_id}", { params: { path }, headers }), [projectId], 0);
  const list = usePoll((headers) => api.GET("/v1/projects/{project_id}/webhooks", { params: { path, query: { limit: 200 } }, headers }), [projectId]);
  const [selected, setSelected] = useState<string | undefined>(undefined);
  const [secret, setSecret] = useState<Created | undefined>(undefined);
  const action = useAction();
  const canAdmin = atLeast(role, "admin", me);
  const items = list.data?.items ?? [];
  const shown = items.find((w) => w.id === selected);

  const rotate = (w: Endpoint): void =>
    void action.run(async () => {
      setSecret(
        await must(
          api.POST("/v1/projects/{project_id}/webhooks/{webhook_id}/secret", {
            params: { path: { project_id: projectId, webhook_id: w.id }, header: { "idempotency-key": idempotencyKey() } },
          }),
        ),
      );
      list.reload();
    }, "New signing secret made: for 24 hours messages are signed with the previous one too.");

  return (
    <>
      <nav aria-label="Breadcrumb" class="crumbs">
        <a href={href("projects")}>Projects</a> / <a href={href("projects", projectId)}>{project.data?.name ?? "…"}</a> /{" "}
        <span aria-current="page">Webhooks</span>
      </nav>
      <h1>Webhooks</h1>
      <p class="muted">Deployment events are posted to each endpoint, signed as Standard Webhooks say, and retried until it takes them.</p>
      {secret ? (
        <SecretShownOnce
          id="webhook-secret"
          title={`Signing secret of ${secret.url}`}
          intro={
            <>
              Verify each message's <code>webhook-signature</code> with it. It is shown only once.
            </>
          }
          fields={[{ id: "webhook-secret-value", label: "Secret", value: secret.secret }]}
          doneLabel="I have copied it"
          onDone={() => setSecret(undefined)}
        />
      ) : null}
      <Section title="Endpoints">
        <ProblemAlert problem={list.error ?? action.problem} />
        <Table label="Webhook endpoints" head={["URL", "Events", "Failures in a row", "Held back until", "Created", "Actions"]} empty={items.length === 0} emptyText="No endpoint yet.">
          {items.map((w) => (
            <tr key={w.id}>
              <th scope="row">
                <code>{w.url}</code>
              </th>
              <td>{w.event_types.length === 0 ? "all" : w.event_types.join(", ")}</td>
              <td>{w.failures}</td>
              <td>
                <Time value={w.open_until} />
              </td>
              <td>
                <Time value={w.created_at} />
              </td>
              <td>
                <div class="actions">
                <button type="button" aria-pressed={selected === w.id} onClick={() => setSelected(selected === w.id ? undefined : w.id)}>
                  Messages
                </button>
                {canAdmin ? (
                  <>
                    <button type="button" disabled={action.busy} onClick={() => rotate(w)}>
                      Rotate secret
                    </button>
                    <ConfirmButton
                      label={`Delete endpoint ${w.url}`}
                      question={`Delete the endpoint ${w.url} and its messages?`}
                      busy={action.busy}
                      onConfirm={() =>
                        void action.run(() => must(api.DELETE("/v1/projects/{project_id}/webhooks/{webhook_id}", { params: { path: { project_id: projectId, webhook_id: w.id } } })), "Endpoint deleted.").then(list.reload)
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
      {shown ? <EndpointDetails key={shown.id} projectId={projectId} endpoint={shown} canAdmin={canAdmin} onSaved={list.reload} /> : null}
      {canAdmin ? (
        <CreateEndpoint
          projectId={projectId}
          onCreated={(created) => {
            setSecret(created);
            list.reload();
          }}
        />
      ) : null}
    </>
  );
}

function EventsPicker(props: { value: EventType[]; onChange: (v: EventType[]) => void }): JSX.Element {
  return (
    <fieldset>
      <legend>Events (none ticked: all)</legend>
      {EVENT_TYPES.map((t) => (
        <Checkbox key={t} label={t} checked={props.value.includes(t)} onChange={(on) => props.onChange(on ? [...props.value, t] : props.value.filter((x) => x !== t))} />
      ))}
    </fieldset>
  );
}

function CreateEndpoint(props: { projectId: string; onCreated: (c: Created) => void }): JSX.Element {
  const [url, setUrl] = useState("");
  const [events, setEvents] = useState<EventType[]>([]);
  const action = useAction();
  const submit = async (e: Event): Promise<void> => {
    e.preventDefault();
    const ok = await action.run(async () => {
      props.onCreated(
        await must(
          api.POST("/v1/projects/{project_id}/webhooks", {
            params: { path: { project_id: props.projectId }, header: { "idempotency-key": idempotencyKey() } },
            body: { url: url.trim(), event_types: events },
          }),
        ),
      );
    }, "Endpoint added: copy its signing secret now, it is shown only once.");
    if (ok) {
      setUrl("");
      setEvents([]);
    }
  };
  return (
    <Section title="Add an endpoint">
      <form onSubmit={(e) => void submit(e)}>
        <Field label="Endpoint URL" type="url" value={url} onInput={setUrl} required placeholder="https://hooks.example.com/bulkhead" />
        <EventsPicker value={events} onChange={setEvents} />
        <ProblemAlert problem={action.problem} />
        <button type="submit" class="primary" disabled={action.busy}>
          Add endpoint
        </button>
      </form>
    </Section>
  );
}

function EndpointDetails(props: { projectId: string; endpoint: Endpoint; canAdmin: boolean; onSaved: () => void }): JSX.Element {
  const w = props.endpoint;
  const path = { project_id: props.projectId, webhook_id: w.id };
  const one = usePoll((headers) => api.GET("/v1/projects/{project_id}/webhooks/{webhook_id}", { params: { path }, headers }), [w.id], 0);
  const messages = usePoll(
    (headers) => api.GET("/v1/projects/{project_id}/webhooks/{webhook_id}/messages", { params: { path, query: { limit: 50, order: "desc" } }, headers }),
    [w.id],
  );
  const [url, setUrl] = useState(w.url);
  const [events, setEvents] = useState<EventType[]>(w.event_types);
  const action = useAction();
  const list = messages.data?.items ?? [];

  const save = async (e: Event): Promise<void> => {
    e.preventDefault();
    await action.run(async () => {
      await must(
        api.PATCH("/v1/projects/{project_id}/webhooks/{webhook_id}", {
          params: { path, header: one.etag ? { "If-Match": one.etag } : {} },
          body: url.trim() === w.url ? { event_types: events } : { url: url.trim(), event_types: events },
        }),
      );
      one.reload();
      props.onSaved();
    }, "Endpoint saved.");
  };

  return (
    <Section title={`Endpoint ${w.url}`}>
      {w.previous_secret_until ? (
        <p class="muted small">
          Messages are signed with the previous secret too until <Time value={w.previous_secret_until} />.
        </p>
      ) : null}
      {props.canAdmin ? (
        <form onSubmit={(e) => void save(e)}>
          <Field label="URL" type="url" value={url} onInput={setUrl} required hint="A new URL closes the breaker." />
          <EventsPicker value={events} onChange={setEvents} />
          <ProblemAlert problem={action.problem} />
          <button type="submit" class="primary" disabled={action.busy}>
            Save endpoint
          </button>
        </form>
      ) : null}
      <h3>Messages</h3>
      <ProblemAlert problem={messages.error} />
      <Table label="Messages" head={["Made", "Event", "State", "Attempts", "Last answer", "Next attempt", "Delivered", "Actions"]} empty={list.length === 0} emptyText="No message yet.">
        {list.map((m) => (
          <tr key={m.id}>
            <th scope="row">
              <Time value={m.created_at} />
            </th>
            <td>{m.event_type}</td>
            <td>
              <StateText value={m.state} />
            </td>
            <td>{m.attempts}</td>
            <td>{m.last_status ? `${m.last_status}` : m.last_error || "—"}</td>
            <td>{m.state === "pending" ? <Time value={m.next_attempt_at} /> : "—"}</td>
            <td>
              <Time value={m.delivered_at} />
            </td>
            <td>
              {props.canAdmin ? (
                <button
                  type="button"
                  disabled={action.busy}
                  onClick={() =>
                    void action
                      .run(
                        () =>
                          must(
                            api.POST("/v1/projects/{project_id}/webhooks/{webhook_id}/messages/{message_id}/replay", {
                              params: { path: { ...path, message_id: m.id }, header: { "idempotency-key": idempotencyKey() } },
                            }),
                          ),
                        "Message sent again.",
                      )
                      .then(messages.reload)
                  }
                >
                  Replay
                </button>
              ) : null}
            </td>
          </tr>
        ))}
      </Table>
    </Section>
  );
}
