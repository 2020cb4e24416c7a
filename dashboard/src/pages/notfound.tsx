import type { JSX } from "preact";

import { href } from "../router";

export function NotFound(): JSX.Element {
  return (
    <>
      <h1>Not found</h1>
      <p>
        There is no such page. <a href={href("projects")}>Go to the projects</a>.
      </p>
    </>
  );
}
