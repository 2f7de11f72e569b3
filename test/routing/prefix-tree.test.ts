/**
 * The approximate prefix tree: matching and claims against a brute-force model (fast-check), the
 * LRU bound in characters, and a leaving worker taking its claims with it.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import fc from "fast-check";
import { PrefixTree, type TreeNode } from "../../src/routing/prefix-tree.js";

/** Every node's labels, claims and sizes, checked for the tree's invariants; returns the size. */
function checkInvariants<W>(tree: PrefixTree<W>): number {
  let chars = 0;
  const walk = (node: TreeNode<W>, depth: number) => {
    for (const [code, child] of node.children ?? []) {
      assert.ok(child.label.length > 0, "no empty label");
      assert.equal(child.label.charCodeAt(0), code, "children are keyed by their label's first character");
      assert.equal(child.parent, node);
      assert.equal(child.depth, depth + child.label.length);
      assert.ok(child.claims.size > 0, "an unclaimed node leaves the tree");
      if (node !== tree.root) {
        for (const w of child.claims.keys())
          assert.ok(node.heldBy(w), "a child's claims are its parent's too");
      }
      chars += child.label.length;
      walk(child, child.depth);
    }
  };
  walk(tree.root, 0);
  assert.equal(tree.size, chars, "size is the labels' characters");
  return chars;
}

function lcp(a: string, b: string): number {
  let k = 0;
  while (k < a.length && k < b.length && a[k] === b[k]) k++;
  return k;
}

describe("prefix tree", () => {
  test("a match reaches as deep as the text agrees, into a label part way", () => {
    const tree = new PrefixTree<string>(1000);
    tree.insert("system: be brief\nuser: hello", "A");
    tree.match("system: be brief\nuser: goodbye");
    assert.equal(tree.matchedChars, "system: be brief\nuser: ".length);
    assert.ok(tree.matchedNode.heldBy("A"));
    tree.insert("system: be brief\nuser: goodbye", "B");
    // The shared head is held by both; each tail by its own worker.
    tree.match("system: be brief\nuser: go");
    assert.equal(tree.matchedChars, "system: be brief\nuser: go".length);
    assert.deepEqual([...tree.matchedNode.claims.keys()], ["B"]);
    tree.match("system: be brief\nuser: ");
    assert.deepEqual([...tree.matchedNode.claims.keys()].sort(), ["A", "B"]);
    tree.match("nothing alike");
    assert.equal(tree.matchedChars, 0);
    assert.equal(tree.matchedNode, tree.root);
    checkInvariants(tree);
  });

  test("matches and claims agree with a brute-force model (no eviction)", () => {
    const text = fc.string({ unit: fc.constantFrom("a", "b", "c"), maxLength: 12 });
    fc.assert(
      fc.property(
        fc.array(fc.tuple(text, fc.constantFrom("w1", "w2", "w3")), { maxLength: 30 }),
        fc.array(text, { maxLength: 10 }),
        (inserts, probes) => {
          const tree = new PrefixTree<string>(1_000_000);
          for (const [t, w] of inserts) tree.insert(t, w);
          checkInvariants(tree);
          for (const probe of probes) {
            tree.match(probe);
            const best = Math.max(0, ...inserts.map(([t]) => lcp(probe, t)));
            assert.equal(tree.matchedChars, best, `match of ${JSON.stringify(probe)}`);
            if (best === 0) continue;
            // Texts reaching the match's end all pass through the matched node (the tree splits
            // wherever two texts part), so it is held by exactly their workers.
            const expected = new Set(inserts.filter(([t]) => lcp(probe, t) >= best).map(([, w]) => w));
            assert.deepEqual(new Set(tree.matchedNode.claims.keys()), expected);
          }
        },
      ),
    );
  });

  test("the size stays within the bound: the least recently used prefixes go first", () => {
    const tree = new PrefixTree<string>(100);
    tree.insert("a".repeat(40), "A"); // oldest
    tree.insert("b".repeat(40), "B");
    tree.match("a".repeat(40));
    assert.equal(tree.matchedChars, 40, "matching does not refresh");
    tree.insert("a".repeat(40), "A"); // refreshed: now b is the oldest
    tree.insert("c".repeat(40), "C"); // 120 chars: one 40-char prefix must go
    assert.ok(tree.size <= 100);
    tree.match("b".repeat(40));
    assert.equal(tree.matchedChars, 0, "the least recently used prefix was evicted");
    tree.match("a".repeat(40));
    assert.equal(tree.matchedChars, 40, "the refreshed one stays");
    checkInvariants(tree);
  });

  test("eviction takes a path's tail before its head, claim by claim", () => {
    const tree = new PrefixTree<string>(30);
    tree.insert("x".repeat(20), "A");
    tree.insert(`${"x".repeat(20)}${"y".repeat(20)}`, "B"); // 40 chars: over the bound
    // The oldest claim, A's on the head, goes first, but B still holds the head, so no character
    // is freed; then B's oldest, its tail (a path's tail is older than its head): 20 chars left.
    assert.equal(tree.size, 20);
    tree.match(`${"x".repeat(20)}${"y".repeat(20)}`);
    assert.equal(tree.matchedChars, 20);
    assert.deepEqual([...tree.matchedNode.claims.keys()], ["B"]);
    checkInvariants(tree);
  });

  test("random inserts, refreshes and removals keep the invariants and the bound", () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.oneof(
            fc.tuple(
              fc.constant("insert" as const),
              fc.string({ unit: fc.constantFrom("p", "q", "r", "s"), maxLength: 30 }),
              fc.integer({ min: 0, max: 3 }),
            ),
            fc.tuple(fc.constant("remove" as const), fc.constant(""), fc.integer({ min: 0, max: 3 })),
          ),
          { maxLength: 60 },
        ),
        fc.integer({ min: 1, max: 80 }),
        (ops, max) => {
          const tree = new PrefixTree<number>(max);
          for (const [op, text, worker] of ops) {
            if (op === "insert") tree.insert(text, worker);
            else tree.removeWorker(worker);
            checkInvariants(tree);
            assert.ok(tree.size <= max, `size ${tree.size} over ${max}`);
          }
        },
      ),
    );
  });

  test("a worker that leaves takes its claims with it; shared nodes stay for the others", () => {
    const tree = new PrefixTree<string>(10_000);
    const system = "You are a helpful assistant. ".repeat(4);
    tree.insert(`${system}user: one`, "A");
    tree.insert(`${system}user: two`, "B");
    tree.insert("another prompt entirely", "A");
    const before = tree.size;
    tree.removeWorker("A");
    checkInvariants(tree);
    assert.equal(tree.size, before - "one".length - "another prompt entirely".length);
    tree.match(`${system}user: one`);
    assert.equal(tree.matchedChars, `${system}user: `.length, "B still holds the shared head");
    assert.deepEqual([...tree.matchedNode.claims.keys()], ["B"]);
    tree.match("another prompt entirely");
    assert.equal(tree.matchedChars, 0);
    tree.removeWorker("B");
    assert.equal(tree.size, 0);
    assert.equal(tree.workerCount, 0);
  });
});
