/**
 * A small strict reader of the Prometheus text exposition (version 0.0.4), enough for the gauges an
 * inference engine exports: every sample line becomes `{ name, labels, value }`; comments (`# HELP`,
 * `# TYPE`) are skipped. A line that is not a sample is an error naming its line number, so a
 * worker that answers /metrics with HTML or JSON is reported as such instead of read as zeros.
 */

export interface PrometheusSample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

export class PrometheusTextError extends Error {}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*/;

/** Parses a whole exposition; throws PrometheusTextError at the first malformed line. */
export function parsePrometheusText(text: string): PrometheusSample[] {
  const samples: PrometheusSample[] = [];
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.trim();
    if (line === "" || line.startsWith("#")) continue;
    try {
      samples.push(parseSampleLine(line));
    } catch (err) {
      throw new PrometheusTextError(`line ${i + 1}: ${(err as Error).message}`);
    }
  }
  return samples;
}

function parseSampleLine(line: string): PrometheusSample {
  const name = NAME.exec(line)?.[0];
  if (name === undefined) throw new Error(`not a sample: ${JSON.stringify(line.slice(0, 60))}`);
  let rest = line.slice(name.length);
  const labels: Record<string, string> = {};
  if (rest.startsWith("{")) rest = parseLabels(rest.slice(1), labels);
  const fields = rest.trim().split(/\s+/);
  if (fields.length < 1 || fields.length > 2 || fields[0] === "") {
    throw new Error(`${name}: expected a value and an optional timestamp`);
  }
  return { name, labels, value: parseValue(name, fields[0]!) };
}

/** Reads `a="x",b="y"}` into `into`; returns what follows the closing brace. */
function parseLabels(text: string, into: Record<string, string>): string {
  let rest = text.trimStart();
  while (!rest.startsWith("}")) {
    const label = LABEL_NAME.exec(rest)?.[0];
    if (label === undefined) throw new Error("bad label name");
    rest = rest.slice(label.length).trimStart();
    if (!rest.startsWith('="')) throw new Error(`label ${label}: expected ="`);
    rest = rest.slice(2);
    let value = "";
    for (;;) {
      const c = rest[0];
      if (c === undefined) throw new Error(`label ${label}: unterminated value`);
      rest = rest.slice(1);
      if (c === '"') break;
      if (c === "\\") {
        const escaped = rest[0];
        rest = rest.slice(1);
        if (escaped === "n") value += "\n";
        else if (escaped === "\\" || escaped === '"') value += escaped;
        else throw new Error(`label ${label}: bad escape`);
      } else value += c;
    }
    into[label] = value;
    rest = rest.trimStart();
    if (rest.startsWith(",")) rest = rest.slice(1).trimStart();
    else if (!rest.startsWith("}")) throw new Error(`label ${label}: expected , or }`);
  }
  return rest.slice(1);
}

function parseValue(name: string, raw: string): number {
  if (raw === "+Inf" || raw === "Inf") return Number.POSITIVE_INFINITY;
  if (raw === "-Inf") return Number.NEGATIVE_INFINITY;
  if (raw === "NaN") return Number.NaN;
  const value = Number(raw);
  if (raw === "" || Number.isNaN(value))
    throw new Error(`${name}: value ${JSON.stringify(raw)} is not a number`);
  return value;
}
