import type { JSX } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";

import { ProblemError, serviceLogs, type LogLineView, type LogPageView, type LogsMissing } from "@bulkhead/client";
import { api, toProblem } from "../api";
import { useFollowed } from "../stream";
import { ProblemAlert, Section, Time } from "../ui";

/** Lines kept on the page; older ones scroll away. */
const KEPT = 2000;

/**
 * A service's logs, live: the newest lines first, then new lines as they are printed (the
 * logs' event stream, resumed from its last page after a drop, paused while the tab is
 * hidden). Instances whose provider cannot be read now are named above the lines.
 */
export function Logs(props: { projectId: string; serviceId: string }): JSX.Element {
  const [lines, setLines] = useState<LogLineView[]>([]);
  const [missing, setMissing] = useState<LogsMissing[]>([]);
  const logRef = useRef<HTMLDivElement>(null);
  // Keep the newest line in view, unless the reader scrolled up.
  useEffect(() => {
    const el = logRef.current;
    if (el !== null && el.scrollHeight - el.scrollTop - el.clientHeight < 80) el.scrollTop = el.scrollHeight;
  }, [lines]);

  // Where the last page ended: a reconnection reads on from there.
  const cursor = useRef<string | undefined>(undefined);
  const path = { project_id: props.projectId, service_id: props.serviceId };
  const add = (more: LogLineView[]): void => {
    if (more.length > 0) setLines((prev) => [...prev, ...more].slice(-KEPT));
  };
  const { status, problem } = useFollowed(async (signal, live) => {
    if (cursor.current === undefined) {
      // The newest lines first, then follow from there.
      const { data, error, response } = await api.GET("/v1/projects/{project_id}/services/{service_id}/logs", {
        params: { path, query: { limit: 200 } },
        signal,
      });
      if (error !== undefined || data === undefined) throw new ProblemError(toProblem(error, response), response.status);
      // Without `Accept: text/event-stream`, the answer is a page of JSON.
      const page = data as LogPageView;
      add(page.lines);
      setMissing(page.missing);
      cursor.current = page.next_cursor;
    }
    for await (const page of serviceLogs(api, path, { cursor: cursor.current, signal })) {
      live();
      add(page.lines);
      setMissing(page.missing);
      cursor.current = page.next_cursor;
    }
    return "again";
  }, [props.projectId, props.serviceId]);

  return (
    <Section title="Logs" id="logs-heading">
      <p class="muted small">Stream: {status}</p>
      <ProblemAlert problem={problem === undefined ? undefined : toProblem(problem)} />
      {missing.length > 0 ? (
        <div role="status" class="notice">
          <p>Lines of these instances are missing for now:</p>
          <ul>
            {missing.map((m) => (
              <li key={m.instance_key}>
                <code>{m.instance_key}</code> ({m.provider}): {m.detail}
              </li>
            ))}
          </ul>
        </div>
      ) : null}
      <div class="log" ref={logRef} role="log" aria-label="Logs of the service" tabIndex={0}>
        {lines.length === 0 ? (
          <p class="muted">No line yet.</p>
        ) : (
          <ol>
            {lines.map((line, n) => (
              <li key={n} class={line.stream === "stderr" ? "stderr" : undefined}>
                <span class="muted small">
                  <Time value={line.time} />
                </span>{" "}
                <code class="kind">{line.instance_key}</code> <span class="muted small">{line.stream}</span> <code class="line">{line.text}</code>
              </li>
            ))}
          </ol>
        )}
      </div>
    </Section>
  );
}
