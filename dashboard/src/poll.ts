import { useCallback, useEffect, useRef, useState } from "preact/hooks";

import { toProblem, type Outcome } from "./api";
import type { Problem } from "@bulkhead/client";

export const POLL_MS = 2000;

export interface Polled<T> {
  data: T | undefined;
  error: Problem | undefined;
  loading: boolean;
  /** The ETag of `data`, when the server sent one. */
  etag: string | undefined;
  /** Fetches again now. */
  reload: () => void;
}

/**
 * Keeps `load`'s answer current: fetches now, then every `intervalMs` while the page is visible,
 * and at once when it becomes visible again. Sends `If-None-Match` with the last ETag (a 304
 * keeps the data). `load` gets the headers to send. `deps` restart it.
 */
export function usePoll<T>(
  load: (headers: Record<string, string>) => Promise<Outcome<T>>,
  deps: unknown[],
  intervalMs: number = POLL_MS,
): Polled<T> {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<Problem | undefined>(undefined);
  const [loading, setLoading] = useState(true);
  const etag = useRef<string | undefined>(undefined);
  const kick = useRef<() => void>(() => undefined);

  useEffect(() => {
    let stopped = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let running = false;
    let again = false;
    etag.current = undefined;
    setData(undefined);
    setError(undefined);
    setLoading(true);

    const tick = async (): Promise<void> => {
      if (stopped) return;
      if (running) {
        again = true;
        return;
      }
      if (timer !== undefined) clearTimeout(timer);
      timer = undefined;
      running = true;
      try {
        const headers: Record<string, string> = {};
        if (etag.current !== undefined) headers["If-None-Match"] = etag.current;
        const outcome = await load(headers);
        if (stopped) return;
        if (outcome.response.status === 304) {
          // unchanged
        } else if (outcome.error !== undefined || !outcome.response.ok) {
          setError(toProblem(outcome.error, outcome.response));
        } else {
          etag.current = outcome.response.headers.get("ETag") ?? undefined;
          setData(outcome.data);
          setError(undefined);
        }
      } catch (e) {
        if (!stopped && !(e instanceof DOMException && e.name === "AbortError")) {
          setError(toProblem(e));
        }
      } finally {
        running = false;
        if (!stopped) setLoading(false);
      }
      if (stopped) return;
      if (again) {
        again = false;
        void tick();
      } else if (!document.hidden && intervalMs > 0) {
        timer = setTimeout(() => void tick(), intervalMs);
      }
    };
    const onVisibility = (): void => {
      if (!document.hidden) void tick();
    };
    kick.current = () => void tick();
    document.addEventListener("visibilitychange", onVisibility);
    void tick();
    return () => {
      stopped = true;
      if (timer !== undefined) clearTimeout(timer);
      document.removeEventListener("visibilitychange", onVisibility);
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, deps);

  const reload = useCallback(() => kick.current(), []);
  return { data, error, loading, reload, etag: etag.current };
}
