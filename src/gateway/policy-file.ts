/** Loads the priority-scheduler YAML (`--priority-scheduler-config`); absent path -> built-in defaults. */
import { readFile } from "node:fs/promises";
import { parseSchedulerYaml } from "../config/scheduler-file.js";
import type { SchedulerFileSettings } from "../core/config.js";

export async function loadSchedulerFile(path: string | undefined): Promise<SchedulerFileSettings> {
  if (path === undefined) return parseSchedulerYaml("");
  const text = await readFile(path, "utf8");
  return parseSchedulerYaml(text);
}
