/**
 * `--ledger`: where the ledger goes. `duckdb:PATH` (an embedded file, the CLI's default),
 * `postgres://...` (shared by replicas) or `off`. A programmatic embedder may also pass any sink.
 */
import { resolve } from "node:path";
import type { LedgerSink } from "./sink.js";

export type LedgerTarget =
  | { kind: "off" }
  | { kind: "duckdb"; path: string }
  | { kind: "postgres"; url: string }
  | { kind: "sink"; sink: LedgerSink };

/** The CLI's default: a DuckDB file in the working directory. */
export const DEFAULT_LEDGER = "duckdb:sluice-ledger.duckdb";
export const DEFAULT_RETENTION_DAYS = 30;

/** Parses a `--ledger` value; throws an Error whose message says what is accepted. */
export function parseLedgerTarget(raw: string): LedgerTarget {
  const value = raw.trim();
  if (value === "off") return { kind: "off" };
  if (value.startsWith("duckdb:")) {
    const path = value.slice("duckdb:".length);
    if (path === "") throw new Error("duckdb: needs a file path (duckdb:sluice-ledger.duckdb)");
    return { kind: "duckdb", path: resolve(path) };
  }
  if (value.startsWith("postgres://") || value.startsWith("postgresql://")) {
    try {
      new URL(value);
    } catch {
      throw new Error(`"${redactUrl(value)}" is not a valid PostgreSQL URL`);
    }
    return { kind: "postgres", url: value };
  }
  throw new Error(`"${redactUrl(value)}" must be duckdb:PATH, postgres://USER@HOST:PORT/DB or off`);
}

/** A URL with its password replaced, for logs and messages. */
export function redactUrl(value: string): string {
  try {
    const url = new URL(value);
    if (url.password === "") return value;
    url.password = "***";
    return url.toString();
  } catch {
    return value.replace(/\/\/([^:/@]*):[^@/]*@/, "//$1:***@");
  }
}

export function describeTarget(target: LedgerTarget): string {
  switch (target.kind) {
    case "off":
      return "off";
    case "duckdb":
      return `duckdb:${target.path}`;
    case "postgres":
      return redactUrl(target.url);
    case "sink":
      return target.sink.description;
  }
}
