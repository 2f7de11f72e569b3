import type { OutcomeSink } from "../contracts/outcome.js";
import type { GatewayOptions } from "../gateway/options.js";
import { type Gateway, startGateway } from "../gateway/server.js";
import { createDashboard, type Dashboard } from "./dashboard.js";

/**
 * Starts the gateway as the CLI runs it: with the live dashboard plugged into its admin listener
 * (the gateway, a floor below, only knows the dashboard's port).
 */
export function startGatewayWithDashboard(
  options: GatewayOptions,
  outcomes?: OutcomeSink,
): Promise<Gateway<Dashboard>> {
  return startGateway(options, { outcomes, dashboard: createDashboard });
}
