/**
 * The parsers of the gateway's option values: text (a command-line argument, an environment
 * variable, a YAML scalar) to a typed value, or an InvalidArgumentError whose message says what the
 * value must be. Commander prints these messages for a flag; the other layers prefix them with the
 * variable or key.
 */
import { parsePriority } from "@sluice/scheduler/core/class.js";
import { InvalidArgumentError } from "commander";
import { parseLedgerTarget } from "../ledger/target.js";

export type Parser<T> = (raw: string) => T;

export function intArg(min: number, what = `an integer >= ${min}`): Parser<number> {
  return (raw) => {
    const n = Number(raw);
    if (raw.trim() === "" || !Number.isInteger(n) || n < min)
      throw new InvalidArgumentError(`must be ${what}`);
    return n;
  };
}

export function numArg(what: string, ok: (n: number) => boolean): Parser<number> {
  return (raw) => {
    const n = Number(raw);
    if (raw.trim() === "" || !Number.isFinite(n) || !ok(n)) throw new InvalidArgumentError(`must be ${what}`);
    return n;
  };
}

export const positiveNumArg = numArg("a number > 0", (n) => n > 0);
export const ratioArg = numArg("a number from 0 to 1", (n) => n >= 0 && n <= 1);

export function choiceArg<const C extends readonly string[]>(choices: C): Parser<C[number]> {
  return (raw) => {
    if (!choices.includes(raw)) throw new InvalidArgumentError(`must be one of ${choices.join(", ")}`);
    return raw as C[number];
  };
}

/** A check that returns what is wrong with a value, or undefined, as a parser of that value. */
export function checkedArg(problem: (raw: string) => string | undefined): Parser<string> {
  return (raw) => {
    const wrong = problem(raw);
    if (wrong !== undefined) throw new InvalidArgumentError(wrong);
    return raw;
  };
}

export const textArg: Parser<string> = (raw) => raw;

/** A worker's base URL, kept as its origin. */
export const urlArg: Parser<string> = (raw) => {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new InvalidArgumentError(`"${raw}" is not a URL (expected http://host:port)`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new InvalidArgumentError(`"${raw}" must be an http:// or https:// URL`);
  }
  return url.origin;
};

export const ledgerArg: Parser<string> = (raw) => {
  try {
    parseLedgerTarget(raw);
  } catch (err) {
    throw new InvalidArgumentError((err as Error).message);
  }
  return raw;
};

// Parsed with the header's lenient rules: an unknown value falls back to default, as in the contract.
export const classArg = (raw: string) => parsePriority(raw).class;
