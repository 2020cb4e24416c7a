import { render } from "preact";

import "./app.css";
import { App } from "./app";

const root = document.getElementById("app");
if (root !== null) render(<App />, root);
