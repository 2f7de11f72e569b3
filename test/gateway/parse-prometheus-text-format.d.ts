/**
 * Types for parse-prometheus-text-format (the package ships none), as the gateway tests use it.
 * The interface names are the gateway tests' own, so this merges cleanly with any other ambient
 * declaration of the module elsewhere in the tree.
 */
declare module "parse-prometheus-text-format" {
  export interface GatewayPromSample {
    value?: string;
    labels?: Record<string, string>;
    buckets?: Record<string, string>;
    count?: string;
    sum?: string;
  }

  export interface GatewayPromFamily {
    name: string;
    help: string;
    type: "COUNTER" | "GAUGE" | "HISTOGRAM" | "SUMMARY" | "UNTYPED";
    metrics: GatewayPromSample[];
  }

  export default function parsePrometheusTextFormat(text: string): GatewayPromFamily[];
}
