import { Component, type ComponentChildren, type JSX } from "preact";
import { useEffect, useState } from "preact/hooks";

import type { TermsStatus } from "@bulkhead/client";
import { api, must } from "./api";
import { loadMe, setUser, useMe } from "./me";
import { callbackTake, type Callback } from "./outside";
import { href, navigate, useRoute } from "./router";
import { onSessionChange, restore, signedIn, signInWithProvider, signOut } from "./session";
import { announce, StatusRegion } from "./ui";
import { SignIn } from "./pages/signin";
import { Terms } from "./pages/terms";
import { Projects } from "./pages/projects";
import { Project } from "./pages/project";
import { Service } from "./pages/service";
import { MyInvitations } from "./pages/invitations";
import { Providers } from "./pages/providers";
import { Provider } from "./pages/provider";
import { Routing } from "./pages/routing";
import { Pipeline } from "./pages/pipeline";
import { Tokens } from "./pages/tokens";
import { Audit } from "./pages/audit";
import { Account } from "./pages/account";
import { GitInstallations } from "./pages/git";
import { Webhooks } from "./pages/webhooks";
import { NotFound } from "./pages/notfound";

type Phase = "starting" | "signed-out" | "terms" | "ready";

export function App(): JSX.Element {
  const [phase, setPhase] = useState<Phase>("starting");
  const [terms, setTerms] = useState<TermsStatus | undefined>(undefined);
  const [notice, setNotice] = useState<string | undefined>(undefined);

  /** After a sign-in or a restored session: who am I, and must I accept the terms first? */
  const enter = async (): Promise<void> => {
    try {
      const [status] = await Promise.all([must(api.GET("/v1/me/terms")), loadMe()]);
      setTerms(status);
      setPhase(status.must_accept ? "terms" : "ready");
    } catch (e) {
      announce(`Could not load your account: ${e instanceof Error ? e.message : String(e)}`);
      setPhase("ready");
    }
  };

  useEffect(() => {
    const callback = callbackTake();
    void (callback === undefined ? restore() : finishOutside(callback)).then((ok) => {
      if (ok) void enter();
      else setPhase("signed-out");
    });
    return onSessionChange(() => {
      if (!signedIn()) {
        setUser(undefined);
        setPhase("signed-out");
      }
    });
  }, []);

  if (phase === "starting") {
    return (
      <>
        <StatusRegion />
        <main id="main" class="narrow">
          <h1>Bulkhead</h1>
          <p class="muted">Restoring your session…</p>
        </main>
      </>
    );
  }
  /**
   * The callback page of an outside provider: a sign-in is finished in cookie mode; a link is
   * finished with the session restored, and shows the account page. Whether signed in after.
   */
  async function finishOutside(callback: Callback): Promise<boolean> {
    if (!callback.ok) {
      setNotice(callback.detail);
      return callback.mode === "link" ? restore() : false;
    }
    if (callback.mode === "sign-in") {
      try {
        await signInWithProvider(callback.provider, callback.finish);
        announce(`Signed in with ${callback.provider}.`);
        return true;
      } catch (e) {
        setNotice(e instanceof Error ? e.message : String(e));
        return false;
      }
    }
    if (!(await restore())) {
      setNotice("Your session ended before the account was linked: sign in, then link it again.");
      return false;
    }
    try {
      await must(api.POST("/v1/me/identities/{provider}/finish", { params: { path: { provider: callback.provider } }, body: callback.finish }));
      announce(`Your ${callback.provider} account is linked.`);
    } catch (e) {
      announce(`Could not link the account: ${e instanceof Error ? e.message : String(e)}`);
    }
    navigate("account");
    return true;
  }

  if (phase === "signed-out") {
    return (
      <>
        <StatusRegion />
        <SignIn onSignedIn={() => void enter()} notice={notice} />
      </>
    );
  }
  if (phase === "terms" && terms !== undefined) {
    return (
      <>
        <StatusRegion />
        <Terms status={terms} onAccepted={() => setPhase("ready")} />
      </>
    );
  }
  return <Shell />;
}

/** The main pages; `admin`: only platform administrators may read it (others are refused). */
const NAV: { label: string; path: string; admin?: boolean }[] = [
  { label: "Projects", path: "projects" },
  { label: "Invitations", path: "invitations" },
  { label: "Providers", path: "providers" },
  { label: "Routing", path: "routing", admin: true },
  { label: "Deploy pipeline", path: "pipeline", admin: true },
  { label: "API tokens", path: "tokens" },
  { label: "Audit log", path: "audit" },
  { label: "Account", path: "account" },
];

function Shell(): JSX.Element {
  const route = useRoute();
  const me = useMe();
  const [menuOpen, setMenuOpen] = useState(false);
  const top = route[0] ?? "projects";

  useEffect(() => {
    setMenuOpen(false);
    document.title = `${TITLES[top] ?? "Not found"} · Bulkhead`;
    document.getElementById("main")?.focus({ preventScroll: true });
  }, [route.join("/")]);

  return (
    <>
      <a class="skip" href="#main" onClick={(e) => { e.preventDefault(); document.getElementById("main")?.focus(); }}>
        Skip to content
      </a>
      <header class="top">
        <a class="brand" href={href("projects")}>
          Bulkhead
        </a>
        <button
          type="button"
          class="menu-toggle"
          aria-expanded={menuOpen}
          aria-controls="nav"
          onClick={() => setMenuOpen(!menuOpen)}
        >
          Menu
        </button>
        <nav id="nav" aria-label="Main" class={menuOpen ? "open" : undefined}>
          <ul>
            {NAV.filter((n) => !n.admin || me?.is_admin === true).map((n) => (
              <li key={n.path}>
                <a href={href(n.path)} aria-current={top === n.path ? "page" : undefined}>
                  {n.label}
                </a>
              </li>
            ))}
          </ul>
          <div class="who">
            <span class="muted small">
              {me ? `${me.email}${me.is_admin ? " (administrator)" : ""}` : ""}
            </span>
            <button type="button" onClick={() => void signOut().then(() => announce("Signed out."))}>
              Sign out
            </button>
          </div>
        </nav>
      </header>
      <StatusRegion />
      <main id="main" tabIndex={-1}>
        <Boundary key={route.join("/")}>
          <Page route={route} />
        </Boundary>
      </main>
    </>
  );
}

const TITLES: Record<string, string> = {
  projects: "Projects",
  invitations: "My invitations",
  providers: "Providers",
  routing: "Routing",
  pipeline: "Deploy pipeline",
  tokens: "API tokens",
  audit: "Audit log",
  account: "Your account",
};

/** A page that fails to render says so, instead of blanking the app. */
class Boundary extends Component<{ children: ComponentChildren }, { error: string | undefined }> {
  override state = { error: undefined as string | undefined };
  override componentDidCatch(error: unknown): void {
    this.setState({ error: error instanceof Error ? error.message : String(error) });
  }
  render(): ComponentChildren {
    if (this.state.error !== undefined) {
      return (
        <div class="alert" role="alert">
          <p>
            <strong>This page failed:</strong> {this.state.error}
          </p>
          <p>Reload the page to try again.</p>
        </div>
      );
    }
    return this.props.children;
  }
}

function Page({ route }: { route: string[] }): JSX.Element {
  const [a, b, c, d] = route;
  switch (a ?? "projects") {
    case "projects":
      if (b === undefined) return <Projects />;
      if (c === "services" && d !== undefined) return <Service projectId={b} serviceId={d} key={d} />;
      if (c === "git" && d === undefined) return <GitInstallations projectId={b} key={b} />;
      if (c === "webhooks" && d === undefined) return <Webhooks projectId={b} key={b} />;
      return <Project projectId={b} key={b} />;
    case "invitations":
      return <MyInvitations />;
    case "providers":
      return b === undefined ? <Providers /> : <Provider name={b} key={b} />;
    case "routing":
      return <Routing />;
    case "pipeline":
      return <Pipeline />;
    case "tokens":
      return <Tokens />;
    case "audit":
      return <Audit />;
    case "account":
      return <Account />;
    default:
      return <NotFound />;
  }
}
