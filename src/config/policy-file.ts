/** Loads the priority-scheduler YAML (`--priority-scheduler-config`); absent path -> built-in defaults. */
import { readFile } from "node:fs/promises";
import type { SchedulerFileSettings } from "@sluice/scheduler/core/config.js";
import { parseSchedulerYaml } from "./scheduler-file.js";

export async function loadSchedulerFile(path: string | undefined): Promise<SchedulerFileSettings> {
  if (path === undefined) return parseSchedulerYaml("");
  const text = await readFile(path, "utf8");
  return parseSchedulerYaml(text);
}
