/**
 * The README's library example is real code: the first ```ts block under "The library in one
 * example" is written to a temporary module importing the library's source
 * (packages/scheduler/src/index.ts) in place of "@sluice/scheduler", type-checked against it, and
 * run (test/structure/library-package.test.ts runs it again against the packed package). Every `console.log(...)` line in it must be followed by
 * a `// <output>` comment, and the output must match.
 */
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";
import { format } from "node:util";
import ts from "typescript";

const README = fileURLToPath(new URL("../../README.md", import.meta.url));
const PUBLIC_API = fileURLToPath(new URL("../../packages/scheduler/src/index.ts", import.meta.url));
const HEADING = "## The library in one example";

/** The first ```ts block after the heading. */
function exampleOf(markdown: string): string {
  const at = markdown.indexOf(`${HEADING}\n`);
  assert.ok(at >= 0, `README.md has no "${HEADING}" heading`);
  const block = /```ts\n([\s\S]*?)```/.exec(markdown.slice(at));
  assert.ok(block, `no \`\`\`ts block under "${HEADING}"`);
  return block[1]!;
}

/** What each console.log line of the example says it prints: the comment on the next line. */
function expectedOutputs(code: string): string[] {
  const lines = code.split("\n");
  const out: string[] = [];
  lines.forEach((line, i) => {
    if (!line.startsWith("console.log(")) return;
    const next = /^\/\/ (.*)$/.exec(lines[i + 1] ?? "");
    assert.ok(next, `README example line ${i + 1}: console.log(...) must be followed by // <output>`);
    out.push(next[1]!);
  });
  return out;
}

describe("README: the library in one example", () => {
  let dir: string;
  let file: string;
  let code: string;

  before(async () => {
    code = exampleOf(await readFile(README, "utf8"));
    assert.match(code, /from "@sluice\/scheduler"/, "the example imports the library by its package name");
    dir = await mkdtemp(join(tmpdir(), "sluice-readme-"));
    // .mts: an ES module wherever the temp directory is (top-level await).
    file = join(dir, "example.mts");
    await writeFile(file, code.replaceAll('from "@sluice/scheduler"', `from ${JSON.stringify(PUBLIC_API)}`));
  });

  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  test("type-checks against the public API", () => {
    const program = ts.createProgram([file], {
      target: ts.ScriptTarget.ES2023,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      lib: ["lib.es2023.d.ts"],
      types: ["node"],
      typeRoots: [fileURLToPath(new URL("../../node_modules/@types", import.meta.url))],
      strict: true,
      noUncheckedIndexedAccess: true,
      allowImportingTsExtensions: true,
      skipLibCheck: true,
      noEmit: true,
    });
    const diagnostics = ts
      .getPreEmitDiagnostics(program)
      .filter((d) => d.file === undefined || d.file.fileName === file);
    const text = ts.formatDiagnostics(diagnostics, {
      getCanonicalFileName: (f) => f,
      getCurrentDirectory: () => dir,
      getNewLine: () => "\n",
    });
    assert.equal(text, "", "the README example does not type-check");
  });

  test("runs, and prints what its comments say", async (t) => {
    const printed: string[] = [];
    t.mock.method(console, "log", (...args: unknown[]) => {
      // Node prints a long object over several lines; the comment has it on one.
      printed.push(format(...args).replace(/\s*\n\s*/g, " "));
    });
    await import(pathToFileURL(file).href);
    t.mock.restoreAll();
    assert.deepEqual(printed, expectedOutputs(code));
  });
});
