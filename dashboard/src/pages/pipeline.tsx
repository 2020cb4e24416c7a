import type { JSX } from "preact";
import { useState } from "preact/hooks";

import { api, idempotencyKey, must } from "../api";
import { useMe } from "../me";
import { usePoll } from "../poll";
import { Field, Loading, ProblemAlert, Section, StateText, Table, Time, useAction } from "../ui";

export function Pipeline(): JSX.Element {
  const me = useMe();
  const view = usePoll((headers) => api.GET("/v1/deploy-pipeline", { headers }), []);
  const action = useAction();
  const [reason, setReason] = useState("");
  const [rate, setRate] = useState("");
  const v = view.data;
  return (
    <>
      <h1>Deploy pipeline</h1>
      <ProblemAlert problem={view.error} />
      {v === undefined ? (
        !view.error && <Loading what="the pipeline" />
      ) : (
        <>
          <Section title="Status">
            <dl class="spec">
              <dt>State</dt>
              <dd>
                <StateText value={v.paused ? "paused" : "running"} />
                {v.paused && v.reason ? ` — ${v.reason}` : ""}
              </dd>
              <dt>Queue depth</dt>
              <dd>{v.reconciler.queue_depth} instances waiting</dd>
              <dt>In flight</dt>
              <dd>
                {Object.entries(v.reconciler.in_flight).length === 0
                  ? "nothing"
                  : Object.entries(v.reconciler.in_flight)
                      .map(([p, n]) => `${p}: ${n}`)
                      .join(", ")}{" "}
                (limit {v.reconciler.concurrency})
              </dd>
              <dt>Drain rate</dt>
              <dd>{v.drain_rate === 0 ? "no limit" : `${v.drain_rate} operations/s`}</dd>
              <dt>Reconciler</dt>
              <dd>
                <code>{v.reconciler.runner}</code>, {v.reconciler.passes} passes, last <Time value={v.reconciler.last_pass_at} />
              </dd>
              <dt>Updated</dt>
              <dd>
                <Time value={v.updated_at} />
              </dd>
            </dl>
            {v.reconciler.recent_errors.length > 0 ? (
              <>
                <h3>Recent errors</h3>
                <Table label="Recent reconciler errors" head={["Error"]}>
                  {v.reconciler.recent_errors.map((e, i) => (
                    <tr key={i}>
                      <td>{typeof e === "string" ? e : JSON.stringify(e)}</td>
                    </tr>
                  ))}
                </Table>
              </>
            ) : null}
          </Section>
          {me?.is_admin ? (
            <Section title="Controls">
              <ProblemAlert problem={action.problem} onDismiss={action.clear} />
              {v.paused ? (
                <button
                  type="button"
                  class="primary"
                  disabled={action.busy}
                  onClick={() => void action.run(() => must(api.POST("/v1/deploy-pipeline/resume", { params: { header: { "idempotency-key": idempotencyKey() } } })), "Pipeline resumed.").then(view.reload)}
                >
                  Resume pipeline
                </button>
              ) : (
                <form
                  class="inline-form"
                  onSubmit={(e) => {
                    e.preventDefault();
                    void action
                      .run(
                        () =>
                          must(
                            api.POST("/v1/deploy-pipeline/pause", {
                              params: { header: { "idempotency-key": idempotencyKey() } },
                              body: reason ? { reason } : {},
                            }),
                          ),
                        "Pipeline paused.",
                      )
                      .then(view.reload);
                  }}
                >
                  <Field label="Reason for pausing" value={reason} onInput={setReason} />
                  <button type="submit" class="danger" disabled={action.busy}>
                    Pause pipeline
                  </button>
                </form>
              )}
              <form
                class="inline-form"
                onSubmit={(e) => {
                  e.preventDefault();
                  void action
                    .run(() => must(api.PATCH("/v1/deploy-pipeline", { body: { drain_rate: Number(rate) } })), `Drain rate set to ${rate || 0}.`)
                    .then((ok) => {
                      if (ok) setRate("");
                      view.reload();
                    });
                }}
              >
                <Field label="Drain rate (operations per second, 0: no limit)" type="number" value={rate} onInput={setRate} required min={0} max={10000} />
                <button type="submit" disabled={action.busy}>
                  Set drain rate
                </button>
              </form>
            </Section>
          ) : null}
        </>
      )}
    </>
  );
}
