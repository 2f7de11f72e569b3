/**
 * The library as a user gets it: `@sluice/scheduler` (packages/scheduler) is built when its dist is
 * missing or older than its source, packed with `npm pack`, and installed from the tarball into an
 * empty project with no registry (`--offline`: it has no dependency). The install must be under
 * 1 MB with no native code and no dependencies, and the README's library example, its types
 * stripped, must run with plain `node` against it and print what its comments say. The package's
 * own README carries the same example, word for word.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import ts from "typescript";

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const LIBRARY = join(ROOT, "packages", "scheduler");
const HEADING = "## The library in one example";
const ONE_MB = 1024 * 1024;

/** The first ```ts block after the heading. */
function exampleOf(markdown: string, where: string): string {
  const at = markdown.indexOf(`${HEADING}\n`);
  assert.ok(at >= 0, `${where} has no "${HEADING}" heading`);
  const block = /```ts\n([\s\S]*?)```/.exec(markdown.slice(at));
  assert.ok(block, `${where}: no \`\`\`ts block under "${HEADING}"`);
  return block[1]!;
}

/** What each console.log line of the example says it prints: the comment on the next line. */
function expectedOutputs(code: string): string[] {
  const lines = code.split("\n");
  return lines.flatMap((line, i) => {
    if (!line.startsWith("console.log(")) return [];
    const next = /^\/\/ (.*)$/.exec(lines[i + 1] ?? "");
    assert.ok(next, `README example line ${i + 1}: console.log(...) must be followed by // <output>`);
    return [next[1]!];
  });
}

interface FileFacts {
  path: string;
  size: number;
  mtimeMs: number;
}

/** Every file under `dir`, with its size and modification time. */
async function filesUnder(dir: string): Promise<FileFacts[]> {
  const out: FileFacts[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (!entry.isFile()) continue;
    const path = join(entry.parentPath, entry.name);
    const { size, mtimeMs } = await stat(path);
    out.push({ path, size, mtimeMs });
  }
  return out;
}

/** The newest modification time of the files under `dir` (0 when there is none). */
async function newestUnder(dir: string): Promise<number> {
  const files = await filesUnder(dir).catch(() => []);
  return files.reduce((newest, f) => Math.max(newest, f.mtimeMs), 0);
}

describe("the library package, packed and installed", () => {
  let dir: string;
  let installed: string;

  before(async () => {
    const built = await newestUnder(join(LIBRARY, "dist"));
    if (built === 0 || built < (await newestUnder(join(LIBRARY, "src")))) {
      await run("npm", ["run", "build", "--workspace", "@sluice/scheduler"], { cwd: ROOT });
    }
    dir = await mkdtemp(join(tmpdir(), "sluice-library-"));
    const { stdout } = await run(
      "npm",
      ["pack", "--workspace", "@sluice/scheduler", "--pack-destination", dir, "--json"],
      { cwd: ROOT },
    );
    const [packed] = JSON.parse(stdout) as Array<{ filename: string }>;
    assert.ok(packed, "npm pack made no tarball");
    const project = join(dir, "project");
    await mkdir(project);
    await writeFile(
      join(project, "package.json"),
      JSON.stringify({ name: "library-probe", private: true, type: "module" }),
    );
    await run("npm", ["install", "--offline", "--no-audit", "--no-fund", join(dir, packed.filename)], {
      cwd: project,
    });
    installed = join(project, "node_modules", "@sluice", "scheduler");
  });

  after(async () => {
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  });

  test("under 1 MB installed, no native code, no dependencies, only what runs and documents it", async () => {
    const files = await filesUnder(join(installed, ".."));
    const size = files.reduce((sum, f) => sum + f.size, 0);
    assert.ok(size < ONE_MB, `installed size ${size} bytes`);
    assert.deepEqual(
      files.filter((f) => f.path.endsWith(".node")).map((f) => f.path),
      [],
    );
    const manifest = JSON.parse(await readFile(join(installed, "package.json"), "utf8"));
    assert.equal(manifest.dependencies, undefined, "the library has no runtime dependency");
    const shipped = files.map((f) => f.path.slice(installed.length + 1)).sort();
    const unexpected = shipped.filter(
      (p) => !/^dist\/.+\.(js|d\.ts)$/.test(p) && !["README.md", "package.json"].includes(p),
    );
    assert.deepEqual(unexpected, [], "the tarball ships dist's .js and .d.ts, the README and package.json");
    assert.ok(shipped.includes("dist/index.js") && shipped.includes("README.md"));
  });

  test("the README's library example runs with plain node against the installed package", async () => {
    const code = exampleOf(await readFile(join(ROOT, "README.md"), "utf8"), "README.md");
    assert.match(code, /from "@sluice\/scheduler"/, "the example imports the library by its package name");
    const js = ts.transpileModule(code, {
      compilerOptions: { target: ts.ScriptTarget.ES2023, module: ts.ModuleKind.ESNext },
    }).outputText;
    // Each console.log call as one JSON line: Node prints a long object over several lines.
    const prelude =
      'import { format as formatForTest } from "node:util";\n' +
      "console.log = (...args) => process.stdout.write(" +
      'JSON.stringify(formatForTest(...args).replace(/\\s*\\n\\s*/g, " ")) + "\\n");\n';
    const file = join(installed, "..", "..", "..", "example.mjs");
    await writeFile(file, prelude + js);
    const { stdout } = await run(process.execPath, [file], { cwd: join(file, "..") });
    const printed = stdout
      .trim()
      .split("\n")
      .map((line) => JSON.parse(line) as string);
    assert.deepEqual(printed, expectedOutputs(code));
  });

  test("the package's README carries the same example", async () => {
    const root = exampleOf(await readFile(join(ROOT, "README.md"), "utf8"), "README.md");
    const own = exampleOf(await readFile(join(LIBRARY, "README.md"), "utf8"), "packages/scheduler/README.md");
    assert.equal(own, root);
  });
});
