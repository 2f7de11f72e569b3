/**
 * Writes a report's output directory atomically: everything goes to a sibling temporary directory
 * first, which is renamed into place at the end. A failure leaves no half-written directory (and
 * the previous output, if any, untouched until the new one is complete).
 */
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
