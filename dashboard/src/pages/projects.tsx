import type { JSX } from "preact";
import { useState } from "preact/hooks";

import { api, idempotencyKey, must } from "../api";
import { usePoll } from "../poll";
import { href, navigate } from "../router";
import { Field, Loading, ProblemAlert, Section, Table, Time, useAction } from "../ui";

export function Projects(): JSX.Element {
  const list = usePoll((headers) => api.GET("/v1/projects", { params: { query: { limit: 200 } }, headers }), []);
  const [name, setName] = useState("");
  const [description, setDescription] = useState("");
  const create = useAction();

  const submit = async (e: Event): Promise<void> => {
    e.preventDefault();
    let id: string | undefined;
    const ok = await create.run(async () => {
      const p = await must(
        api.POST("/v1/projects", {
          params: { header: { "idempotency-key": idempotencyKey() } },
          body: description ? { name: name.trim(), description } : { name: name.trim() },
        }),
      );
      id = p.id;
    }, `Project ${name} created.`);
    if (ok && id) {
      setName("");
      setDescription("");
      navigate("projects", id);
    }
  };

  const items = list.data?.items ?? [];
  return (
    <>
      <h1>Projects</h1>
      <Section title="Your projects">
        <ProblemAlert problem={list.error} />
        {list.loading && !list.data ? (
          <Loading what="projects" />
        ) : (
          <Table label="Projects" head={["Name", "Description", "Created"]} empty={items.length === 0} emptyText="No project yet.">
            {items.map((p) => (
              <tr key={p.id}>
                <th scope="row">
                  <a href={href("projects", p.id)}>{p.name}</a>
                </th>
                <td>{p.description}</td>
                <td>
                  <Time value={p.created_at} />
                </td>
              </tr>
            ))}
          </Table>
        )}
      </Section>
      <Section title="Create a project">
        <form onSubmit={(e) => void submit(e)}>
          <Field label="Project name" value={name} onInput={setName} required hint="1 to 100 characters." />
          <Field label="Description" value={description} onInput={setDescription} />
          <ProblemAlert problem={create.problem} />
          <button type="submit" class="primary" disabled={create.busy}>
            Create project
          </button>
        </form>
      </Section>
    </>
  );
}
