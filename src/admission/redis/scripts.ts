/**
 * The Lua scripts registered on a connection (ioredis runs them by SHA and loads them again when a
 * restarted Redis answers NOSCRIPT). One call, one round trip, one atomic decision.
 */
import type { Redis } from "ioredis";
import {
  ADMIT_SCRIPT,
  CANCEL_SCRIPT,
  REFUSE_SCRIPT,
  RELEASE_SCRIPT,
  TRANSFER_SCRIPT,
} from "./lua/admission.js";
import { BUDGET_ADD_SCRIPT, BUDGET_OP_SCRIPT, BUDGET_PEEK_SCRIPT } from "./lua/budget-state.js";
import { ADOPT_SCRIPT, HEARTBEAT_SCRIPT, PIN_SCRIPT } from "./lua/membership.js";

const SCRIPTS = {
  sluiceAdmit: ADMIT_SCRIPT,
  sluiceRelease: RELEASE_SCRIPT,
  sluiceCancel: CANCEL_SCRIPT,
  sluiceTransfer: TRANSFER_SCRIPT,
  sluiceRefuse: REFUSE_SCRIPT,
  sluiceHeartbeat: HEARTBEAT_SCRIPT,
  sluiceAdopt: ADOPT_SCRIPT,
  sluicePin: PIN_SCRIPT,
  sluiceBudgetOp: BUDGET_OP_SCRIPT,
  sluiceBudgetAdd: BUDGET_ADD_SCRIPT,
  sluiceBudgetPeek: BUDGET_PEEK_SCRIPT,
} as const;

export type ScriptName = keyof typeof SCRIPTS;

/** Defines every script on the client (numberOfKeys is given per call). */
export function defineScripts(client: Redis): void {
  for (const [name, lua] of Object.entries(SCRIPTS)) client.defineCommand(name, { lua });
}

type ScriptFn = (numKeys: number, ...keysAndArgs: Array<string | number>) => Promise<unknown>;

/** Runs a script defined by defineScripts: one EVALSHA. */
export function runScript(
  client: Redis,
  name: ScriptName,
  keys: readonly string[],
  args: ReadonlyArray<string | number>,
): Promise<unknown> {
  const fn = (client as unknown as Record<ScriptName, ScriptFn>)[name];
  return fn.call(client, keys.length, ...keys, ...args);
}
