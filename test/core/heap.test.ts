/** The one intrusive heap against a plain model: random pushes, key changes and removals. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { IndexedHeap } from "@sluice/scheduler/core/heap.js";
import fc from "fast-check";

interface Item {
  id: number;
  key: number;
  at: number;
}

class ItemHeap extends IndexedHeap<Item> {
  protected less(a: Item, b: Item): boolean {
    return a.key < b.key || (a.key === b.key && a.id < b.id);
  }
  protected setIndex(item: Item, index: number): void {
    item.at = index;
  }
}

type Op =
  | { op: "push"; key: number }
  | { op: "change"; pick: number; key: number }
  | { op: "remove"; pick: number }
  | { op: "pop" };

const ops = fc.array(
  fc.oneof(
    fc.record({ op: fc.constant("push" as const), key: fc.integer({ min: 0, max: 20 }) }),
    fc.record({ op: fc.constant("change" as const), pick: fc.nat(), key: fc.integer({ min: 0, max: 20 }) }),
    fc.record({ op: fc.constant("remove" as const), pick: fc.nat() }),
    fc.record({ op: fc.constant("pop" as const) }),
  ),
  { maxLength: 200 },
);

test("IndexedHeap keeps the least item on top and every item's own index right", () => {
  fc.assert(
    fc.property(ops, (script: Op[]) => {
      const heap = new ItemHeap();
      const live: Item[] = [];
      let nextId = 0;
      for (const step of script) {
        if (step.op === "push") {
          const item = { id: nextId++, key: step.key, at: -1 };
          heap.push(item);
          live.push(item);
        } else if (live.length > 0 && step.op === "change") {
          const item = live[step.pick % live.length]!;
          const before = item.key;
          item.key = step.key;
          if (step.key < before) heap.decreased(item.at);
          else heap.increased(item.at);
        } else if (live.length > 0 && step.op === "remove") {
          const item = live.splice(step.pick % live.length, 1)[0]!;
          heap.removeAt(item.at);
        } else if (live.length > 0 && step.op === "pop") {
          const top = heap.peek()!;
          heap.removeAt(top.at);
          live.splice(live.indexOf(top), 1);
        }
        assert.equal(heap.size, live.length);
        for (const [i, item] of heap.items.entries()) assert.equal(item.at, i, "intrusive index");
        const least = [...live].sort((a, b) => a.key - b.key || a.id - b.id)[0];
        assert.equal(heap.peek(), least);
      }
    }),
    { numRuns: 300 },
  );
});
