import type { PlacementPolicy, ProviderPreference, ServiceSource } from "@bulkhead/client";

/** A command from a JSON array of strings, or else from words separated by spaces. */
export function parseCommand(text: string): string[] {
  const t = text.trim();
  if (t.startsWith("[")) {
    const parsed: unknown = JSON.parse(t);
    if (!Array.isArray(parsed) || parsed.some((x) => typeof x !== "string")) {
      throw new Error("The command must be a JSON array of strings.");
    }
    return parsed as string[];
  }
  return t.split(/\s+/).filter((w) => w !== "");
}

/** `gcp, aws:2, metal` → preferences (an optional `:weight` after each name). */
export function parseProviders(text: string): ProviderPreference[] {
  return text
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s !== "")
    .map((s) => {
      const [name, weight] = s.split(":");
      const p: ProviderPreference = { name: (name ?? "").trim() };
      if (weight !== undefined && weight.trim() !== "") p.weight = Number(weight);
      return p;
    });
}

export function providersText(p: PlacementPolicy | undefined): string {
  return (p?.providers ?? []).map((x) => (x.weight !== undefined && x.weight !== 1 ? `${x.name}:${x.weight}` : x.name)).join(", ");
}

export function sourceText(s: ServiceSource): string {
  switch (s.type) {
    case "command":
      return JSON.stringify(s.command);
    case "artifact":
      return s.image;
    case "git":
      return `${JSON.stringify(s.command)} @ ${s.repository}`;
  }
}

/** What the spec form edits of a source: its command or image (and a repository's URL). */
export function sourceEditable(s: ServiceSource): string {
  return s.type === "artifact" ? s.image : JSON.stringify(s.command);
}

/** `s` with its command or image replaced by `text` (and a repository by `repository`). */
export function sourceEdited(s: ServiceSource, text: string, repository: string): ServiceSource {
  switch (s.type) {
    case "command":
      return { type: "command", command: parseCommand(text) };
    case "artifact":
      return { type: "artifact", image: text.trim() };
    case "git":
      return { ...s, repository: repository.trim(), command: parseCommand(text) };
  }
}
