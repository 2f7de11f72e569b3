/**
 * The approximate prefix tree of cache-aware routing: a radix tree over prompt characters that
 * remembers which workers served which prefixes (what each worker's KV cache probably still holds).
 *
 * Each node is an edge label; each (node, worker) pair is a claim. A worker's claims sit in its own
 * least-recently-used list. Serving a prompt claims its whole path for the worker, deepest node
 * first, so a node's claim is always more recent than its children's: the head of a worker's list
 * is always a claim no child of its node shares, and evicting it never orphans a deeper claim. A
 * node nobody claims is unlinked. The tree's size is the characters of its labels; past the bound,
 * the least recent claim of any worker goes first. A worker that leaves takes its claims with it.
 *
 * Matching compares whole labels as strings (`slice(...) === label`: V8 compares flat strings with
 * memcmp, where `startsWith` and `charCodeAt` loops go a character at a time), and narrows the one
 * label where the text diverges by chunks before its last characters. New labels are copied out of
 * the prompt, so the tree never keeps a whole request's text alive through a slice of it.
 */

class Claim<W> {
  prev: Claim<W> | null = null;
  next: Claim<W> | null = null;
  /** Insertion order across all workers: the smallest head is the least recent claim. */
  tick = 0;

  constructor(
    readonly node: TreeNode<W>,
    readonly worker: W,
  ) {}
}

/** A worker's claims, least recent first. */
class ClaimList<W> {
  head: Claim<W> | null = null;
  tail: Claim<W> | null = null;

  append(claim: Claim<W>): void {
    claim.next = null;
    claim.prev = this.tail;
    if (this.tail !== null) this.tail.next = claim;
    else this.head = claim;
    this.tail = claim;
  }

  insertAfter(anchor: Claim<W>, claim: Claim<W>): void {
    claim.prev = anchor;
    claim.next = anchor.next;
    if (anchor.next !== null) anchor.next.prev = claim;
    else this.tail = claim;
    anchor.next = claim;
  }

  remove(claim: Claim<W>): void {
    if (claim.prev !== null) claim.prev.next = claim.next;
    else this.head = claim.next;
    if (claim.next !== null) claim.next.prev = claim.prev;
    else this.tail = claim.prev;
    claim.prev = claim.next = null;
  }
}

export class TreeNode<W> {
  /** Children by the first code unit of their label. */
  children: Map<number, TreeNode<W>> | undefined;
  readonly claims = new Map<W, Claim<W>>();

  constructor(
    public label: string,
    public parent: TreeNode<W> | null,
    /** Characters from the root to the end of this node's label. */
    public depth: number,
  ) {}

  /** True when `worker` served a prompt through this node. */
  heldBy(worker: W): boolean {
    return this.claims.has(worker);
  }
}

/** A copy of `text` that does not keep the string it was sliced from alive. */
function ownedCopy(text: string): string {
  // A slice of a fresh concatenation flattens only these characters (V8 slices longer strings
  // by reference to their parent).
  return (text + " ").slice(0, -1);
}

export class PrefixTree<W> {
  readonly root = new TreeNode<W>("", null, 0);
  private readonly lists = new Map<W, ClaimList<W>>();
  private chars = 0;
  private tick = 0;
  /** The last match: the deepest node reached and the characters matched (set by `match`). */
  matchedNode: TreeNode<W> = this.root;
  matchedChars = 0;

  constructor(private readonly maxChars: number) {
    if (!(maxChars >= 1)) throw new RangeError(`the tree size must be >= 1, got ${maxChars}`);
  }

  /** Characters held (the sum of the labels' lengths). */
  get size(): number {
    return this.chars;
  }

  /** Workers holding at least one claim. */
  get workerCount(): number {
    return this.lists.size;
  }

  /**
   * Walks `text` down the tree: sets `matchedNode` to the deepest node reached (possibly one whose
   * label the text leaves part way) and `matchedChars` to the characters matched. Claims stay as
   * they are.
   */
  match(text: string): void {
    const len = text.length;
    let node = this.root;
    let pos = 0;
    while (pos < len) {
      const child = node.children?.get(text.charCodeAt(pos));
      if (child === undefined) break;
      const label = child.label;
      if (startsWithAt(text, label, pos)) {
        pos += label.length;
        node = child;
        continue;
      }
      // The text leaves this label part way: what it shares still counts, held by its claimants.
      pos += commonPrefix(label, text, pos);
      node = child;
      break;
    }
    this.matchedNode = node;
    this.matchedChars = pos;
  }

  /** `worker` served `text`: claims its whole path for the worker, then evicts past the bound. */
  insert(text: string, worker: W): void {
    const len = text.length;
    if (len === 0) return;
    let node = this.root;
    let pos = 0;
    while (pos < len) {
      const code = text.charCodeAt(pos);
      const child = node.children?.get(code);
      if (child === undefined) {
        const leaf = new TreeNode<W>(ownedCopy(text.slice(pos)), node, len);
        node.children ??= new Map();
        node.children.set(code, leaf);
        this.chars += len - pos;
        node = leaf;
        break;
      }
      const label = child.label;
      if (startsWithAt(text, label, pos)) {
        pos += label.length;
        node = child;
        continue;
      }
      const k = commonPrefix(label, text, pos);
      node = this.split(node, child, k);
      pos += k;
    }
    this.claimPath(node, worker);
    this.evict();
  }

  /** Drops every claim of `worker`. */
  removeWorker(worker: W): void {
    const list = this.lists.get(worker);
    if (list === undefined) return;
    // Least recent first: a node's claim goes after its children's, so no node is unlinked while a
    // child still holds a claim of this worker.
    for (let claim = list.head; claim !== null; claim = list.head) this.drop(claim, list);
    this.lists.delete(worker);
  }

  /**
   * Splits `child` (a child of `parent`) after its first `k` characters: a new node holds them and
   * every claim of `child`, each placed right after the claim it copies, so the parent's claims stay
   * more recent than the child's.
   */
  private split(parent: TreeNode<W>, child: TreeNode<W>, k: number): TreeNode<W> {
    const label = child.label;
    // Both halves are copies: a dropped half must not keep the other's characters alive.
    const mid = new TreeNode<W>(ownedCopy(label.slice(0, k)), parent, parent.depth + k);
    parent.children!.set(label.charCodeAt(0), mid);
    child.label = ownedCopy(label.slice(k));
    child.parent = mid;
    mid.children = new Map([[child.label.charCodeAt(0), child]]);
    for (const [worker, claim] of child.claims) {
      const copy = new Claim(mid, worker);
      copy.tick = claim.tick;
      this.lists.get(worker)!.insertAfter(claim, copy);
      mid.claims.set(worker, copy);
    }
    return mid;
  }

  /** Claims `node` and its ancestors for `worker`, deepest first, as the most recent claims. */
  private claimPath(node: TreeNode<W>, worker: W): void {
    let list = this.lists.get(worker);
    if (list === undefined) {
      list = new ClaimList<W>();
      this.lists.set(worker, list);
    }
    for (let n: TreeNode<W> = node; n !== this.root; n = n.parent!) {
      let claim = n.claims.get(worker);
      if (claim === undefined) {
        claim = new Claim(n, worker);
        n.claims.set(worker, claim);
      } else list.remove(claim);
      claim.tick = ++this.tick;
      list.append(claim);
    }
  }

  private evict(): void {
    while (this.chars > this.maxChars) {
      let oldest: Claim<W> | null = null;
      let oldestList: ClaimList<W> | undefined;
      for (const list of this.lists.values()) {
        const head = list.head;
        if (head !== null && (oldest === null || head.tick < oldest.tick)) {
          oldest = head;
          oldestList = list;
        }
      }
      if (oldest === null) return;
      this.drop(oldest, oldestList!);
      if (oldestList!.head === null) this.lists.delete(oldest.worker);
    }
  }

  /** Removes one claim; a node nobody claims any more leaves the tree. */
  private drop(claim: Claim<W>, list: ClaimList<W>): void {
    list.remove(claim);
    const node = claim.node;
    node.claims.delete(claim.worker);
    if (node.claims.size > 0) return;
    // Unclaimed: its children were unclaimed (and unlinked) before it.
    const parent = node.parent!;
    parent.children!.delete(node.label.charCodeAt(0));
    if (parent.children!.size === 0) parent.children = undefined;
    node.parent = null;
    this.chars -= node.label.length;
  }
}

/** `text` holds `label` at `pos` (compared as whole strings: one memcmp). */
function startsWithAt(text: string, label: string, pos: number): boolean {
  const end = pos + label.length;
  return end <= text.length && text.slice(pos, end) === label;
}

/** Characters compared as one string before the last ones go one at a time. */
const CHUNK = 64;

/** Length of the common prefix of `label` and `text` from `pos` (the first character is known equal). */
function commonPrefix(label: string, text: string, pos: number): number {
  const max = Math.min(label.length, text.length - pos);
  let k = 1;
  while (k + CHUNK <= max && label.slice(k, k + CHUNK) === text.slice(pos + k, pos + k + CHUNK)) k += CHUNK;
  while (k < max && label.charCodeAt(k) === text.charCodeAt(pos + k)) k++;
  return k;
}
