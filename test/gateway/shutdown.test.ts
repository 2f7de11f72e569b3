/**
 * The gateway's one shutdown list: steps run in stage order whatever order the parts registered in,
 * once however often stop() is called, and a failing step does not keep the later ones from running.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ShutdownList, STOP_STAGES } from "../../src/gateway/shutdown.js";

describe("ShutdownList", () => {
  it("runs the steps in stage order, not in the order they were registered", async () => {
    const stops = new ShutdownList();
    const ran: string[] = [];
    for (const stage of [...STOP_STAGES].reverse()) stops.add(stage, () => void ran.push(stage));
    await stops.stop();
    assert.deepEqual(ran, [...STOP_STAGES]);
  });

  it("waits for each step before the next (an async step finishes first)", async () => {
    const stops = new ShutdownList();
    const ran: string[] = [];
    stops.add("ledger", () => void ran.push("ledger"));
    stops.add("workers", async () => {
      await new Promise((resolve) => setTimeout(resolve, 20));
      ran.push("workers");
    });
    await stops.stop();
    assert.deepEqual(ran, ["workers", "ledger"]);
  });

  it("runs once: a second stop() (a second signal during the drain) waits for the same run", async () => {
    const stops = new ShutdownList();
    let runs = 0;
    stops.add("pools", () => {
      runs++;
    });
    await Promise.all([stops.stop(), stops.stop()]);
    await stops.stop();
    assert.equal(runs, 1);
  });

  it("runs every step when one fails, then throws the first failure", async () => {
    const stops = new ShutdownList();
    const ran: string[] = [];
    stops.add("admin listener", () => {
      throw new Error("admin close failed");
    });
    stops.add("workers", () => {
      throw new Error("workers close failed");
    });
    stops.add("tracing", () => void ran.push("tracing"));
    await assert.rejects(stops.stop(), /admin close failed/);
    assert.deepEqual(ran, ["tracing"]);
  });

  it("refuses a stage registered twice, or after the stop began", async () => {
    const stops = new ShutdownList();
    stops.add("workers", () => {});
    assert.throws(() => stops.add("workers", () => {}), /"workers" is registered twice/);
    void stops.stop();
    assert.throws(
      () => stops.add("ledger", () => {}),
      /"ledger" registered its stop step after the stop began/,
    );
  });
});
