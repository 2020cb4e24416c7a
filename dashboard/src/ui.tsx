import type { ComponentChildren, JSX } from "preact";
import { useEffect, useState } from "preact/hooks";

import type { Problem } from "@bulkhead/client";
import { problemOf } from "./api";

// ---- the live region: one polite status line for the whole app ----

let statusText = "";
const statusListeners = new Set<(text: string) => void>();

/** Says something in the app's `aria-live` status region. */
export function announce(text: string): void {
  statusText = text;
  for (const fn of statusListeners) fn(text);
}

export function StatusRegion(): JSX.Element {
  const [text, setText] = useState(statusText);
  useEffect(() => {
    statusListeners.add(setText);
    return () => void statusListeners.delete(setText);
  }, []);
  return (
    <div class="status" role="status" aria-live="polite" aria-atomic="true">
      {text}
    </div>
  );
}

/** A refused call: the Problem's detail (and code), as an alert. */
export function ProblemAlert(props: { problem: Problem | undefined; onDismiss?: () => void }): JSX.Element | null {
  const { problem } = props;
  if (problem === undefined) return null;
  return (
    <div class="alert" role="alert">
      <p>
        <strong>{problem.title || "Error"}</strong>
        {problem.status ? ` (${problem.status})` : ""}: {problem.detail}
      </p>
      <p class="muted small">
        code <code>{problem.code}</code>
        {problem.request_id ? (
          <>
            {" "}
            · request <code>{problem.request_id}</code>
          </>
        ) : null}
      </p>
      {props.onDismiss ? (
        <button type="button" class="link" onClick={props.onDismiss}>
          Dismiss
        </button>
      ) : null}
    </div>
  );
}

/**
 * Runs an action: `busy` while it runs, its Problem (if refused) for a `ProblemAlert`, and a
 * line in the status region when it succeeds.
 */
export function useAction(): {
  busy: boolean;
  problem: Problem | undefined;
  clear: () => void;
  run: (fn: () => Promise<unknown>, done?: string) => Promise<boolean>;
} {
  const [busy, setBusy] = useState(false);
  const [problem, setProblem] = useState<Problem | undefined>(undefined);
  const run = async (fn: () => Promise<unknown>, done?: string): Promise<boolean> => {
    setBusy(true);
    setProblem(undefined);
    try {
      await fn();
      if (done) announce(done);
      return true;
    } catch (e) {
      const p = problemOf(e);
      setProblem(p);
      announce(`Error: ${p.detail}`);
      return false;
    } finally {
      setBusy(false);
    }
  };
  return { busy, problem, clear: () => setProblem(undefined), run };
}

export function Section(props: { title: string; id?: string; children: ComponentChildren; level?: 2 | 3 }): JSX.Element {
  const id = props.id ?? `s-${props.title.toLowerCase().replace(/[^a-z0-9]+/g, "-")}`;
  const H = props.level === 3 ? "h3" : "h2";
  return (
    <section class="card" aria-labelledby={id}>
      <H id={id}>{props.title}</H>
      {props.children}
    </section>
  );
}

/** A table that scrolls sideways inside its own box on narrow screens. */
export function Table(props: { label: string; head: string[]; children: ComponentChildren; empty?: boolean; emptyText?: string }): JSX.Element {
  if (props.empty) return <p class="muted">{props.emptyText ?? "None yet."}</p>;
  return (
    <div class="table-wrap" role="region" aria-label={`${props.label} table`} tabIndex={0}>
      <table>
        <caption class="sr-only">{props.label}</caption>
        <thead>
          <tr>
            {props.head.map((h) => (
              <th scope="col" key={h}>
                {h}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>{props.children}</tbody>
      </table>
    </div>
  );
}

const GOOD = new Set(["healthy", "running", "verified", "succeeded", "done", "active"]);
const BAD = new Set(["failed", "unavailable", "unhealthy", "cancelled", "disabled", "removed"]);
const WARN = new Set(["degraded", "draining", "drained", "pending", "queued", "placing", "rolling_out", "provisioning", "starting", "removing", "superseded", "unknown", "no_plugin", "running_evacuation"]);

/** A state as text, with a colour class (never colour alone). */
export function StateText(props: { value: string | null | undefined }): JSX.Element {
  const v = props.value ?? "unknown";
  const cls = GOOD.has(v) ? "state good" : BAD.has(v) ? "state bad" : WARN.has(v) ? "state warn" : "state";
  return <span class={cls}>{v.replace(/_/g, " ")}</span>;
}

export function Time(props: { value: string | null | undefined }): JSX.Element {
  if (!props.value) return <span class="muted">—</span>;
  const d = new Date(props.value);
  return (
    <time dateTime={props.value} title={props.value}>
      {d.toLocaleString()}
    </time>
  );
}

let fieldSeq = 0;
function useFieldId(): string {
  const [id] = useState(() => `f${++fieldSeq}`);
  return id;
}

export function Field(props: {
  label: string;
  value: string;
  onInput: (v: string) => void;
  type?: string;
  required?: boolean;
  hint?: string;
  autoComplete?: string;
  placeholder?: string;
  min?: number;
  max?: number;
  inputMode?: "numeric" | "text" | "email";
}): JSX.Element {
  const id = useFieldId();
  const hintId = props.hint ? `${id}-hint` : undefined;
  return (
    <div class="field">
      <label for={id}>{props.label}</label>
      <input
        id={id}
        type={props.type ?? "text"}
        value={props.value}
        required={props.required}
        autoComplete={props.autoComplete}
        placeholder={props.placeholder}
        min={props.min}
        max={props.max}
        inputMode={props.inputMode}
        aria-describedby={hintId}
        onInput={(e) => props.onInput((e.currentTarget as HTMLInputElement).value)}
      />
      {props.hint ? (
        <small id={hintId} class="muted">
          {props.hint}
        </small>
      ) : null}
    </div>
  );
}

export function Select(props: {
  label: string;
  value: string;
  onChange: (v: string) => void;
  options: { value: string; label: string }[];
  hideLabel?: boolean;
}): JSX.Element {
  const id = useFieldId();
  return (
    <div class={props.hideLabel ? "field inline" : "field"}>
      <label for={id} class={props.hideLabel ? "sr-only" : undefined}>
        {props.label}
      </label>
      <select id={id} value={props.value} onChange={(e) => props.onChange((e.currentTarget as HTMLSelectElement).value)}>
        {props.options.map((o) => (
          <option value={o.value} key={o.value}>
            {o.label}
          </option>
        ))}
      </select>
    </div>
  );
}

export function Checkbox(props: { label: string; checked: boolean; onChange: (v: boolean) => void }): JSX.Element {
  const id = useFieldId();
  return (
    <div class="field check">
      <input id={id} type="checkbox" checked={props.checked} onChange={(e) => props.onChange((e.currentTarget as HTMLInputElement).checked)} />
      <label for={id}>{props.label}</label>
    </div>
  );
}

/**
 * A button for what cannot be undone (delete, remove, revoke, evacuate): it asks `question`
 * first and runs `onConfirm` only when the user agrees.
 */
export function ConfirmButton(props: { label?: string; question: string; busy: boolean; onConfirm: () => void; children: ComponentChildren }): JSX.Element {
  return (
    <button
      type="button"
      class="danger"
      aria-label={props.label}
      disabled={props.busy}
      onClick={() => {
        if (confirm(props.question)) props.onConfirm();
      }}
    >
      {props.children}
    </button>
  );
}

/**
 * What the server shows once (a new API token, a webhook's or an installation's secret): each
 * value read-only, selected on focus, with a copy button, until the user says it is kept.
 */
export function SecretShownOnce(props: {
  id: string;
  title: string;
  intro: ComponentChildren;
  fields: { id: string; label: string; value: string }[];
  doneLabel: string;
  onDone: () => void;
}): JSX.Element {
  return (
    <section class="card secret" aria-labelledby={props.id}>
      <h2 id={props.id}>{props.title}</h2>
      <p>{props.intro}</p>
      {props.fields.map((f) => (
        <p key={f.id}>
          <label for={f.id}>{f.label}</label>
          <input id={f.id} class="mono" readOnly value={f.value} onFocus={(e) => (e.currentTarget as HTMLInputElement).select()} />
        </p>
      ))}
      <div class="actions">
        {props.fields.map((f) => (
          <CopyButton key={f.id} text={f.value} label={`Copy ${f.label.charAt(0).toLowerCase()}${f.label.slice(1)}`} />
        ))}
        <button type="button" onClick={props.onDone}>
          {props.doneLabel}
        </button>
      </div>
    </section>
  );
}

export function Loading(props: { what: string }): JSX.Element {
  return <p class="muted">Loading {props.what}…</p>;
}

/** Copies text to the clipboard, saying so in the status region. */
export function CopyButton(props: { text: string; label?: string }): JSX.Element {
  return (
    <button
      type="button"
      onClick={() => {
        navigator.clipboard
          .writeText(props.text)
          .then(() => announce("Copied to the clipboard."))
          .catch(() => announce("Could not copy: select the text and copy it by hand."));
      }}
    >
      {props.label ?? "Copy"}
    </button>
  );
}
