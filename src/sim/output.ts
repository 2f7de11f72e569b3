/**
 * Writes a report's output directory atomically: everything goes to a sibling temporary directory
 * first, which is renamed into place at the end. A failure leaves no half-written directory (and
 * the previous output, if any, untouched until the new one is complete). Also: the rewrite of one
 * generated section of a Markdown file (BENCHMARKS.md) between its markers.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { mkdir, rename, rm, stat, writeFile } from "node:fs/promises";
import { basename, dirname, join, resolve } from "node:path";

export async function writeOutputDir(dir: string, files: Record<string, string>): Promise<void> {
  const target = resolve(dir);
  const parent = dirname(target);
  await mkdir(parent, { recursive: true });
  const tmp = join(parent, `.${basename(target)}.tmp-${process.pid}`);
  await rm(tmp, { recursive: true, force: true });
  try {
    await mkdir(tmp);
    for (const [name, content] of Object.entries(files)) {
      const path = join(tmp, name);
      await mkdir(dirname(path), { recursive: true });
      await writeFile(path, content);
    }
    let old: string | undefined;
    const existing = await stat(target).catch(() => undefined);
    if (existing !== undefined) {
      if (!existing.isDirectory()) throw new Error(`--out ${dir}: exists and is not a directory`);
      old = join(parent, `.${basename(target)}.old-${process.pid}`);
      await rm(old, { recursive: true, force: true });
      await rename(target, old);
    }
    await rename(tmp, target);
    if (old !== undefined) await rm(old, { recursive: true, force: true });
  } catch (err) {
    await rm(tmp, { recursive: true, force: true });
    throw err;
  }
}

/**
 * Replaces the text between `start` and `end` (markers included) with `section`, or appends it
 * with its markers when the file has neither marker.
 */
export function rewriteSection(path: string, start: string, end: string, section: string): void {
  const text = readFileSync(path, "utf8");
  const block = `${start}\n${section}\n${end}`;
  const a = text.indexOf(start);
  const b = text.indexOf(end);
  if (a !== -1 && b > a) writeFileSync(path, text.slice(0, a) + block + text.slice(b + end.length));
  else if (a === -1 && b === -1)
    writeFileSync(path, `${text}${text.endsWith("\n") ? "\n" : "\n\n"}${block}\n`);
  else throw new Error(`${path}: found only one of ${start} / ${end}; fix the file by hand`);
}
