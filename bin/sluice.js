#!/usr/bin/env node
// Runs the built CLI (npm ci builds dist/ through the prepare script).
import { main } from "../dist/cli/main.js";

main(process.argv.slice(2)).then((code) => {
  if (code !== 0) process.exit(code);
});
