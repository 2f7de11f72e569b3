/**
 * The Gateway API Inference Extension's request headers (docs/kubernetes.md): a gateway in front of
 * sluice names the request's fairness bucket in `x-gateway-inference-fairness-id` and its
 * InferenceObjective in `x-gateway-inference-objective`. Only that gateway may set them, so sluice
 * reads them only when `--inference-gateway-headers` is on; otherwise it removes them, so a client
 * can neither pick its tenant or class through them nor hand them to a worker or an endpoint
 * picker behind sluice.
 */
import type { IncomingHttpHeaders } from "node:http";
import type { PriorityClass } from "@sluice/scheduler/core/class.js";
import {
  classForPriority,
  type InferenceGatewaySettings,
  MAX_PRIORITY,
  MIN_PRIORITY,
  OBJECTIVE_NAME,
} from "../../config/inference-objectives.js";
import { GatewayError } from "../../contracts/gateway-error.js";

export const FAIRNESS_ID_HEADER = "x-gateway-inference-fairness-id";
export const OBJECTIVE_HEADER = "x-gateway-inference-objective";
/** The class input sluice reads; a trusted objective replaces it. */
const PRIORITY_HEADER = "x-smg-priority";

/** Tenant keys from the fairness id: `fairness:<id>`, beside `auth:` and `header:`. */
export const FAIRNESS_TENANT_PREFIX = "fairness:";

/** A fairness id: 1 to 253 visible ASCII characters but the comma (it becomes a tenant key and a metric label). */
const FAIRNESS_ID = /^[\x21-\x2b\x2d-\x7e]{1,253}$/;
const INTEGER = /^[+-]?\d+$/;

/** What a trusted objective header resolved to. */
export interface ResolvedObjective {
  readonly name: string;
  readonly priority: number;
  /** Whether the name was listed in `inference_objectives` (or was an integer priority itself). */
  readonly known: boolean;
  readonly class: PriorityClass;
}

function invalid(header: string, reason: string): GatewayError {
  return new GatewayError("invalid_inference_header", `${header}: ${reason}`, { param: header });
}

/**
 * The single value of a header. Node joins a repeated header's values with ", ", so a comma means
 * the header came twice (or holds one, which neither header may): refused, as the two could differ.
 */
function single(headers: IncomingHttpHeaders, name: string): string | undefined {
  const raw = headers[name];
  if (raw === undefined) return undefined;
  const values = Array.isArray(raw) ? raw : [raw];
  if (values.length > 1 || values[0]!.includes(","))
    throw invalid(name, "sent more than once, or holds a comma");
  const value = values[0]!.trim();
  return value === "" ? undefined : value;
}

/** The tenant key a trusted fairness id names, or undefined when absent; 400 when malformed. */
export function fairnessTenant(headers: IncomingHttpHeaders): string | undefined {
  const id = single(headers, FAIRNESS_ID_HEADER);
  if (id === undefined) return undefined;
  if (!FAIRNESS_ID.test(id)) throw invalid(FAIRNESS_ID_HEADER, "must be 1 to 253 visible ASCII characters");
  return `${FAIRNESS_TENANT_PREFIX}${id}`;
}

/**
 * The objective a trusted header names: a listed name takes its priority; an integer is the
 * priority itself; any other well-formed name has priority 0, as the extension's endpoint picker
 * treats an objective it has no resource for. 400 when the value is neither a name nor an
 * integer, or the integer is outside the 32-bit range.
 */
export function resolveObjective(
  headers: IncomingHttpHeaders,
  settings: InferenceGatewaySettings,
): ResolvedObjective | undefined {
  const name = single(headers, OBJECTIVE_HEADER);
  if (name === undefined) return undefined;
  let priority: number;
  let known = true;
  const listed = settings.objectives.get(name);
  if (listed !== undefined) priority = listed;
  else if (INTEGER.test(name)) {
    priority = Number(name);
    if (priority < MIN_PRIORITY || priority > MAX_PRIORITY) {
      throw invalid(OBJECTIVE_HEADER, `priority must be from ${MIN_PRIORITY} to ${MAX_PRIORITY}`);
    }
  } else if (OBJECTIVE_NAME.test(name)) {
    priority = 0;
    known = false;
  } else {
    throw invalid(
      OBJECTIVE_HEADER,
      "must be an InferenceObjective name (lowercase letters, digits, - and .) or an integer priority",
    );
  }
  return { name, priority, known, class: classForPriority(priority, settings.classes) };
}

/**
 * Applies a trusted objective to the request: its class becomes the request's class input (in
 * place of any `x-smg-priority` the client sent), so admission, shedding and the worker see it
 * and the tenant's `max_class` still caps it. Returns the objective, or undefined when absent.
 */
export function applyObjective(
  headers: IncomingHttpHeaders,
  settings: InferenceGatewaySettings,
): ResolvedObjective | undefined {
  const objective = resolveObjective(headers, settings);
  if (objective !== undefined) headers[PRIORITY_HEADER] = objective.class;
  return objective;
}

/** Removes both headers (they are not trusted): nothing downstream sees what a client put there. */
export function dropInferenceGatewayHeaders(headers: IncomingHttpHeaders): void {
  delete headers[FAIRNESS_ID_HEADER];
  delete headers[OBJECTIVE_HEADER];
}
