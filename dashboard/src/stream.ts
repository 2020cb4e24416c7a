import { useEffect, useState } from "preact/hooks";

import { ProblemError, type Problem } from "@bulkhead/client";

/**
 * What one connection of a followed stream does: reads until the stream ends (`"again"`:
 * reconnect after a pause, from where it stopped) or until there is nothing more to follow
 * (`"done"`), calling `live()` once it gets its first item. It is given a signal that aborts it
 * when the tab is hidden or the page is left.
 */
export type StreamRead = (signal: AbortSignal, live: () => void) => Promise<"again" | "done">;

/**
 * Follows a stream with `read`, reconnecting after a drop (backing off from 0.5 to 5 s),
 * pausing while the tab is hidden and resuming when it is shown again, and stopping when the
 * API refuses (403, 404) or `read` says it is done. Returns the stream's status for people and
 * the last problem the API answered. `deps` restart it.
 */
export function useFollowed(read: StreamRead, deps: unknown[]): { status: string; problem: Problem | undefined; setStatus: (status: string) => void } {
  const [status, setStatus] = useState("connecting");
  const [problem, setProblem] = useState<Problem | undefined>(undefined);
  useEffect(() => {
    let stopped = false;
    let connected = false;
    let controller: AbortController | undefined;
    let wake: (() => void) | undefined;
    const sleep = (ms: number): Promise<void> =>
      new Promise((resolve) => {
        const t = setTimeout(resolve, ms);
        wake = () => {
          clearTimeout(t);
          resolve();
        };
      });
    const onVisibility = (): void => {
      if (document.hidden) controller?.abort();
      else wake?.();
    };
    document.addEventListener("visibilitychange", onVisibility);

    void (async () => {
      let backoff = 500;
      while (!stopped) {
        if (document.hidden) {
          setStatus("paused while the tab is hidden");
          await sleep(60_000);
          continue;
        }
        controller = new AbortController();
        setStatus(connected ? "reconnecting" : "connecting");
        try {
          const outcome = await read(controller.signal, () => {
            connected = true;
            backoff = 500;
            setStatus("live");
            setProblem(undefined);
          });
          if (stopped || outcome === "done") return;
          if (controller.signal.aborted) continue; // hidden: resume when visible
        } catch (e) {
          if (stopped) return;
          if (controller.signal.aborted) continue;
          if (e instanceof ProblemError) {
            setProblem(e.problem);
            if (e.status === 403 || e.status === 404) {
              setStatus("refused");
              return;
            }
          }
          setStatus("disconnected: retrying");
        }
        await sleep(backoff);
        backoff = Math.min(backoff * 2, 5_000);
      }
    })();
    return () => {
      stopped = true;
      controller?.abort();
      wake?.();
      document.removeEventListener("visibilitychange", onVisibility);
    };
  }, deps);
  return { status, problem, setStatus };
}
