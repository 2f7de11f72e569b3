/** `pricing` in the gateway YAML (and in simulation scenarios): USD per million tokens, per model. */

import { CONFIG_MESSAGES as M, type Pricing } from "@sluice/scheduler/core/config.js";
import { z } from "zod";

export const pricingSchema: z.ZodType<Pricing> = z.record(
  z.string(),
  z.strictObject(
    {
      input_per_mtok: z.number({ error: M.number }).min(0, M.atLeastZero),
      output_per_mtok: z.number({ error: M.number }).min(0, M.atLeastZero),
    },
    { error: M.mapping },
  ),
  { error: M.mapping },
);
