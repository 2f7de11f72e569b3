/**
 * scripts/dockerfile-steps.sh never passes a Dockerfile it did not run in full: an instruction it
 * cannot emulate, or a failing RUN, fails it with the step named. (The repository's Dockerfile, run
 * to a served /health, is test/deploy/image-and-package.test.ts.)
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { type TestContext, test } from "node:test";
import { REPO_ROOT } from "../helpers/cli-process.js";
import { writeTempFile } from "../helpers/harness.js";

async function runSteps(t: TestContext, dockerfile: string) {
  const file = await writeTempFile(t, "Dockerfile", dockerfile);
  const r = spawnSync("bash", [join(REPO_ROOT, "scripts/dockerfile-steps.sh"), "--file", file], {
    encoding: "utf8",
    timeout: 60_000,
  });
  return { code: r.status, stderr: r.stderr };
}

test("an instruction the script cannot emulate fails it, named", async (t) => {
  const r = await runSteps(t, "FROM node:20-slim AS build\nWORKDIR /src\nADD package.json ./\n");
  assert.equal(r.code, 1);
  assert.match(r.stderr, /unsupported instruction: ADD package\.json \.\//);
});

test("a failing RUN fails the script with its stage and command", async (t) => {
  const r = await runSteps(
    t,
    "FROM node:20-slim AS build\nWORKDIR /src\nRUN test -f missing-file \\\n  && true\n",
  );
  assert.equal(r.code, 1);
  assert.match(r.stderr, /RUN failed in stage build: test -f missing-file +&& true/);
});

test("a COPY source outside the repository is refused", async (t) => {
  const r = await runSteps(t, "FROM node:20-slim AS build\nCOPY ../etc/passwd ./\n");
  assert.equal(r.code, 1);
  assert.match(r.stderr, /COPY: a source must be inside the repository, got \.\.\/etc\/passwd/);
});
