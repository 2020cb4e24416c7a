import { useEffect, useState } from "preact/hooks";

import type { ProjectRole, UserView } from "@bulkhead/client";
import { api, must } from "./api";
import { usePoll } from "./poll";

let me: UserView | undefined;
const listeners = new Set<(u: UserView | undefined) => void>();

export function currentUser(): UserView | undefined {
  return me;
}

export function setUser(u: UserView | undefined): void {
  me = u;
  for (const fn of listeners) fn(u);
}

export async function loadMe(): Promise<UserView> {
  const u = await must(api.GET("/v1/me"));
  setUser(u);
  return u;
}

export function useMe(): UserView | undefined {
  const [u, setU] = useState(me);
  useEffect(() => {
    listeners.add(setU);
    return () => void listeners.delete(setU);
  }, []);
  return u;
}

const RANK: Record<ProjectRole, number> = { viewer: 0, member: 1, admin: 2, owner: 3 };

/** Whether `role` (a platform admin counts as owner) is at least `least`. */
export function atLeast(role: ProjectRole | undefined, least: ProjectRole, user?: UserView): boolean {
  if (user?.is_admin) return true;
  return role !== undefined && RANK[role] >= RANK[least];
}

/** The signed-in user's role in a project (polled: a role change shows without reload). */
export function useProjectRole(projectId: string): { role: ProjectRole | undefined; known: boolean } {
  const user = useMe();
  const members = usePoll(
    (headers) => api.GET("/v1/projects/{project_id}/members", { params: { path: { project_id: projectId }, query: { limit: 200 } }, headers }),
    [projectId],
    5000,
  );
  const mine = members.data?.items.find((m) => m.user_id === user?.id);
  return { role: mine?.role, known: members.data !== undefined || members.error !== undefined };
}
