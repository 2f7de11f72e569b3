/**
 * The layering of docs/design.md ("Layout"), checked over the import graph as the code has it:
 *
 *   library (@sluice/scheduler) → contracts → {admission, capacity, shedding, accounting, routing,
 *   ledger, tracing, metrics, config, mock-worker} → gateway → {dashboard, cli, sim}
 *
 * A file may import its own room, any room on a lower floor, and a room of its own floor as long as
 * the rooms of that floor import each other without a circle. The library imports nothing but itself
 * (it has no runtime dependency). Inside the gateway the same holds for its rooms (http, tenancy,
 * fleet, request, admin) over the composition at its top.
 */
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const LIBRARY = "packages/scheduler/src";
const LIBRARY_NAME = "@sluice/scheduler";

/** Floors, lowest first; a room is a folder (or file) under src/, named by its path. */
const FLOORS: readonly (readonly string[])[] = [
  ["library"],
  ["contracts"],
  [
    "admission",
    "capacity",
    "shedding",
    "accounting",
    "routing",
    "ledger",
    "tracing",
    "metrics",
    "config",
    "mock-worker",
  ],
  ["gateway"],
  ["dashboard", "cli", "sim", "index.ts"],
];

/** The gateway's own rooms, lowest first; `gateway` is its composition (server.ts, options.ts). */
const GATEWAY_FLOORS: readonly (readonly string[])[] = [
  ["gateway/http"],
  ["gateway/options.ts"],
  ["gateway/tenancy", "gateway/fleet"],
  ["gateway/request", "gateway/admin"],
  ["gateway"],
];

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(join(ROOT, dir), { withFileTypes: true })) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory()) out.push(...sourceFiles(path));
    else if (entry.name.endsWith(".ts")) out.push(path);
  }
  return out;
}

/** Every module specifier a file imports or re-exports (static and dynamic). */
function specifiers(file: string): string[] {
  const text = readFileSync(join(ROOT, file), "utf8");
  const out: string[] = [];
  for (const m of text.matchAll(/(?:^|\n)\s*(?:import|export)[^;]*?from\s*"([^"]+)"/g)) out.push(m[1]!);
  for (const m of text.matchAll(/\bimport\(\s*"([^"]+)"\s*\)/g)) out.push(m[1]!);
  for (const m of text.matchAll(/(?:^|\n)import\s+"([^"]+)"/g)) out.push(m[1]!);
  return out;
}

/** The repository path a specifier names, or undefined for a package or a Node built-in. */
function target(file: string, spec: string): string | undefined {
  if (spec === LIBRARY_NAME) return `${LIBRARY}/index.ts`;
  if (spec.startsWith(`${LIBRARY_NAME}/`)) return `${LIBRARY}/${spec.slice(LIBRARY_NAME.length + 1)}`;
  if (!spec.startsWith(".")) return undefined;
  return relative(ROOT, resolve(ROOT, dirname(file), spec));
}

function roomOf(path: string): string {
  if (path.startsWith(`${LIBRARY}/`)) return "library";
  const rest = path.replace(/^src\//, "");
  const slash = rest.indexOf("/");
  return slash < 0 ? rest.replace(/\.js$/, ".ts") : rest.slice(0, slash);
}

function gatewayRoomOf(path: string): string {
  const rest = path.replace(/^src\//, "").replace(/\.js$/, ".ts");
  for (const floor of GATEWAY_FLOORS)
    for (const room of floor) if (room.endsWith(".ts") && rest === room) return room;
  const parts = rest.split("/");
  return parts.length > 2 ? `${parts[0]}/${parts[1]}` : "gateway";
}

const floorOf = (floors: readonly (readonly string[])[], room: string): number =>
  floors.findIndex((f) => f.includes(room));

interface Arrow {
  from: string;
  to: string;
  fromRoom: string;
  toRoom: string;
}

function arrows(): Arrow[] {
  const files = [...sourceFiles("src"), ...sourceFiles(LIBRARY)];
  const out: Arrow[] = [];
  for (const from of files) {
    for (const spec of specifiers(from)) {
      const to = target(from, spec);
      if (to === undefined) continue;
      out.push({ from, to, fromRoom: roomOf(from), toRoom: roomOf(to) });
    }
  }
  return out;
}

/** Circles in a graph of rooms, as "a -> b -> a" strings. */
function circles(edges: ReadonlyMap<string, ReadonlySet<string>>): string[] {
  const found: string[] = [];
  const state = new Map<string, "open" | "done">();
  const stack: string[] = [];
  const visit = (node: string): void => {
    state.set(node, "open");
    stack.push(node);
    for (const next of edges.get(node) ?? []) {
      if (state.get(next) === "open") found.push([...stack.slice(stack.indexOf(next)), next].join(" -> "));
      else if (state.get(next) === undefined) visit(next);
    }
    stack.pop();
    state.set(node, "done");
  };
  for (const node of edges.keys()) if (state.get(node) === undefined) visit(node);
  return found;
}

function checkFloors(
  list: readonly Arrow[],
  floors: readonly (readonly string[])[],
  room: (a: Arrow) => [string, string],
): string[] {
  const problems: string[] = [];
  const sideways = new Map<string, Set<string>>();
  for (const a of list) {
    const [fromRoom, toRoom] = room(a);
    if (fromRoom === toRoom) continue;
    const fromFloor = floorOf(floors, fromRoom);
    const toFloor = floorOf(floors, toRoom);
    if (fromFloor < 0) problems.push(`${a.from}: room ${fromRoom} is on no floor of the layering`);
    else if (toFloor < 0) problems.push(`${a.from} imports ${a.to}: room ${toRoom} is on no floor`);
    else if (toFloor > fromFloor)
      problems.push(`${a.from} (${fromRoom}) imports ${a.to} (${toRoom}): an arrow going up`);
    else if (toFloor === fromFloor) {
      if (!sideways.has(fromRoom)) sideways.set(fromRoom, new Set());
      sideways.get(fromRoom)!.add(toRoom);
    }
  }
  for (const circle of circles(sideways)) problems.push(`rooms of one floor import each other: ${circle}`);
  return problems;
}

describe("layering (docs/design.md, Layout)", () => {
  const all = arrows();

  it("reads the graph it checks: every relative import names a file that exists", () => {
    assert.ok(all.length > 300, `only ${all.length} imports read`);
    const missing = all.filter((a) => {
      try {
        readFileSync(join(ROOT, a.to.replace(/\.js$/, ".ts")));
        return false;
      } catch {
        return true;
      }
    });
    assert.deepEqual(
      missing.map((a) => `${a.from} -> ${a.to}`),
      [],
    );
  });

  it("no arrow goes up between the floors, and no circle joins rooms of one floor", () => {
    assert.deepEqual(
      checkFloors(all, FLOORS, (a) => [a.fromRoom, a.toRoom]),
      [],
    );
  });

  it("inside the gateway, the same between its rooms", () => {
    const inside = all.filter((a) => a.fromRoom === "gateway" && a.toRoom === "gateway");
    assert.ok(inside.length > 20);
    assert.deepEqual(
      checkFloors(inside, GATEWAY_FLOORS, (a) => [gatewayRoomOf(a.from), gatewayRoomOf(a.to)]),
      [],
    );
  });

  it("the library imports nothing but itself: no package, no Node built-in", () => {
    const outside = sourceFiles(LIBRARY).flatMap((file) =>
      specifiers(file)
        .filter((spec) => !spec.startsWith("."))
        .map((spec) => `${file} imports ${spec}`),
    );
    assert.deepEqual(outside, []);
  });

  it("catches what it is meant to catch (an upward arrow and a circle, made up)", () => {
    const up: Arrow = {
      from: "src/ledger/row.ts",
      to: "src/gateway/x.ts",
      fromRoom: "ledger",
      toRoom: "gateway",
    };
    const a: Arrow = {
      from: "src/metrics/a.ts",
      to: "src/routing/b.ts",
      fromRoom: "metrics",
      toRoom: "routing",
    };
    const b: Arrow = {
      from: "src/routing/b.ts",
      to: "src/metrics/a.ts",
      fromRoom: "routing",
      toRoom: "metrics",
    };
    const found = checkFloors([up, a, b], FLOORS, (x) => [x.fromRoom, x.toRoom]);
    assert.equal(found.length, 2);
    assert.match(found[0]!, /an arrow going up/);
    assert.match(found[1]!, /import each other/);
  });
});
