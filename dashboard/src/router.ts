import { useEffect, useState } from "preact/hooks";

/** The route: the hash without `#`, split on `/` (e.g. `#/projects/1` → ["projects", "1"]). */
export function currentRoute(): string[] {
  return location.hash
    .replace(/^#\/?/, "")
    .split("/")
    .filter((s) => s !== "")
    .map((s) => decodeURIComponent(s));
}

export function useRoute(): string[] {
  const [route, setRoute] = useState(currentRoute);
  useEffect(() => {
    const on = (): void => {
      const now = currentRoute();
      setRoute((shown) => (shown.join("/") === now.join("/") ? shown : now));
    };
    window.addEventListener("hashchange", on);
    // The hash may have changed between the first render and this subscription (a link
    // followed as the page appears): its event is gone, so look once now.
    on();
    return () => window.removeEventListener("hashchange", on);
  }, []);
  return route;
}

export function href(...parts: string[]): string {
  return `#/${parts.map((p) => encodeURIComponent(p)).join("/")}`;
}

export function navigate(...parts: string[]): void {
  location.hash = href(...parts);
}
